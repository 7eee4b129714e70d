"""The Runtime registry: every dispatcher replica reads the whole compacted
``runtime.registrations`` topic from the beginning (no consumer group) and keeps the latest
registration per Runtime in memory. Malformed registrations go to the DLQ (``Tail``): every
replica reads the whole topic, so each replica dead-letters a bad registration once per start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shared import records
from shared.domain.binding import RuntimeInfo, from_registration
from shared.kafka import DeadLetters
from shared.logging import get_logger
from shared.tail import Tail

log = get_logger(__name__)


class RegistryTail(Tail):
    at_end = False  # the whole compacted topic: every Runtime's latest registration

    def __init__(self, settings: Any, topic: str, on_change: Callable[[RuntimeInfo], None],
                 dlq: DeadLetters) -> None:
        super().__init__(settings, topic, frozenset({records.REGISTRATION}), dlq)
        self.runtimes: dict[str, RuntimeInfo] = {}
        self.on_change = on_change

    def dispatch(self, value: dict[str, Any]) -> None:
        rt = from_registration(value)  # a malformed one raises: the Tail dead-letters it
        prev = self.runtimes.get(rt.runtime_id)
        self.runtimes[rt.runtime_id] = rt
        if prev is None or prev.status != rt.status:
            log.info("registry.runtime", runtime_id=rt.runtime_id, harness=rt.harness,
                     status=rt.status, message_images=rt.message_images,
                     function_result_images=rt.function_result_images)
        self.on_change(rt)


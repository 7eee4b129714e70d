"""The Runtime registry: every dispatcher replica reads the whole compacted
``runtime.registrations`` topic from the beginning (no consumer group) and keeps the latest
registration per Runtime in memory. Malformed registrations go to the DLQ."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from shared.domain.binding import RuntimeInfo, from_registration
from shared.logging import get_logger
from shared.tail import Tail

log = get_logger(__name__)


class RegistryTail(Tail):
    at_end = False  # the whole compacted topic: every Runtime's latest registration

    def __init__(self, settings: Any, topic: str, on_change: Callable[[RuntimeInfo], None]) -> None:
        super().__init__(settings, topic)
        self.runtimes: dict[str, RuntimeInfo] = {}
        self.on_change = on_change
        self.rejected: list[tuple[dict[str, Any], str]] = []

    def dispatch(self, value: dict[str, Any]) -> None:
        try:
            rt = from_registration(value)
        except (KeyError, TypeError, ValueError) as exc:
            log.warning("registry.bad_registration", reason=repr(exc))
            self.rejected.append((value, repr(exc)))
            return
        prev = self.runtimes.get(rt.runtime_id)
        self.runtimes[rt.runtime_id] = rt
        if prev is None or prev.status != rt.status:
            log.info("registry.runtime", runtime_id=rt.runtime_id, harness=rt.harness,
                     status=rt.status, message_images=rt.message_images,
                     function_result_images=rt.function_result_images)
        self.on_change(rt)


async def drain_rejected(
    tail: RegistryTail, dlq: Callable[[dict[str, Any], str], Awaitable[None]]
) -> None:
    while tail.rejected:
        value, reason = tail.rejected.pop(0)
        await dlq(value, reason)

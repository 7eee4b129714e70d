"""Per-process tails of a topic: every partition assigned, no consumer group, positions
resolved before the tail reports ready (``shared.kafka.assigned_consumer``)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer

from shared.domain.poison import UNPROCESSABLE, Poison
from shared.kafka import DeadLetters, assigned_consumer, stop_consumer
from shared.logging import get_logger
from shared.messages.decode import RecordType
from shared.service import cancel
from shared.settings import Settings

log = get_logger(__name__)


class Tail:
    """One topic read by this process alone (no consumer group), every record handed to
    ``dispatch``. ``at_end``: only what is published after ``start`` (answers, Items); else the
    whole topic first (the compacted registry). Records that are not the tail's ``RecordType``
    (``shared.messages.decode``), or that ``dispatch`` refuses with
    ``ValueError``/``KeyError``/``TypeError``, go to the DLQ. ``dispatch`` gets the record's
    value exactly as decoded, and the record itself (its headers: a trace to go on in)."""

    at_end = True

    def __init__(self, settings: Settings, topic: str,
                 kind: RecordType[Any], dlq: DeadLetters) -> None:
        self.settings = settings
        self.topic = topic
        self.kind = kind
        self.dlq = dlq
        self.consumer: AIOKafkaConsumer | None = None
        self.task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    async def start(self) -> None:
        self.consumer = await assigned_consumer(self.settings, self.topic, at_end=self.at_end)
        self.ready.set()
        self.task = asyncio.create_task(self._run(), name=f"tail:{self.topic}")

    async def _run(self) -> None:
        assert self.consumer is not None
        while True:
            try:
                batches = await self.consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    for r in records:
                        await self._one(r)
                await self.polled()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("tail.error", topic=self.topic)
                await asyncio.sleep(0.5)

    async def _one(self, r: Any) -> None:
        value = self._decode(r.value or b"")
        if isinstance(value, Poison):
            await self.dlq.record(r, value)
            return
        try:
            self.dispatch(value, r)
        except (KeyError, TypeError, ValueError) as exc:
            await self.dlq.record(r, Poison(UNPROCESSABLE, repr(exc)[:300]))

    def _decode(self, raw: bytes) -> dict[str, Any] | Poison:
        got = self.kind.decode(raw)
        return got if isinstance(got, Poison) else got.value

    def dispatch(self, value: dict[str, Any], record: Any = None) -> None:  # overridden
        """``value`` of ``record`` (``None`` when a caller hands a value over by hand)."""
        raise NotImplementedError

    async def polled(self) -> None:
        """Called after every poll, records or not (a tail that tracks its own lag)."""

    async def stop(self) -> None:
        await cancel(self.task)
        if self.consumer:
            await stop_consumer(self.consumer)

"""The Runtime registry: every dispatcher replica reads the whole compacted
``runtime.registrations`` topic from the beginning (no consumer group) and keeps the latest
registration per Runtime in memory. Malformed registrations go to the DLQ (``Tail``): every
replica reads the whole topic, so each replica dead-letters a bad registration once per start.
A registration is decoded with its one model, ``shared.messages.runtime.RuntimeRegistration``
(strict types, a known harness and status, an RFC 3339 heartbeat with a time zone) before it
reaches the registry.

A missed heartbeat only means something while this replica can read the topic: when the broker
is away no heartbeat can arrive, whether the Runtime lives or not. ``ReadingClock`` knows when
the tail was last caught up with the topic; while it is not, no heartbeat ages, and once it is
again every Runtime gets a whole heartbeat timeout from that moment (``RegistryTail.seen``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from services.dispatcher.domain.binding import RuntimeInfo, from_registration
from shared.kafka import DeadLetters
from shared.logging import get_logger
from shared.messages import decode
from shared.tail import Tail

log = get_logger(__name__)


class ReadingClock:
    """When this replica last read ``runtime.registrations`` up to its end, and whether it has
    been unable to since (``fresh_s``: longer than that without a caught-up poll counts as not
    reading). Times are seconds since the epoch, as heartbeats carry them."""

    def __init__(self, fresh_s: float) -> None:
        self.fresh_s = fresh_s
        self.caught_up_at: float | None = None
        self.resumed_at: float | None = None  # reading again after a stretch without

    def caught_up(self, at: float) -> None:
        if self.caught_up_at is not None and at - self.caught_up_at > self.fresh_s:
            # A stretch without reading: the heartbeats of that stretch never had a chance.
            self.resumed_at = at
            log.info("registry.reading_resumed", blind_s=round(at - self.caught_up_at, 3))
        if self.caught_up_at is None or at > self.caught_up_at:
            self.caught_up_at = at

    def reading(self, now: float) -> bool:
        return self.caught_up_at is not None and now - self.caught_up_at <= self.fresh_s

    def floor(self, now: float) -> float | None:
        """The earliest moment a heartbeat's age may count from: ``now`` while not reading
        (nothing ages), the resumption after the last stretch without reading, or ``None``
        (heartbeats age from their own time: a replica that starts has no stretch to make up
        for, and a Runtime dead for an hour is gone at once)."""
        if not self.reading(now):
            return now
        return self.resumed_at


class RegistryTail(Tail):
    at_end = False  # the whole compacted topic: every Runtime's latest registration

    def __init__(self, settings: Any, topic: str, on_change: Callable[[RuntimeInfo], None],
                 dlq: DeadLetters) -> None:
        super().__init__(settings, topic, decode.REGISTRATION, dlq)
        self.runtimes: dict[str, RuntimeInfo] = {}
        self.on_change = on_change
        # A caught-up poll comes every fetch wait (50 ms) while the broker answers; a fifth of
        # the heartbeat timeout leaves room for a busy event loop without hiding an outage.
        timeout = float(settings.runtime_heartbeat_timeout_s)
        self.clock = ReadingClock(fresh_s=min(max(0.5, timeout / 5), 3.0))

    def dispatch(self, value: dict[str, Any], record: Any = None) -> None:
        rt = from_registration(value)  # decoded already: a Registration (Tail)
        prev = self.runtimes.get(rt.runtime_id)
        self.runtimes[rt.runtime_id] = rt
        if prev is None or prev.status != rt.status:
            log.info("registry.runtime", runtime_id=rt.runtime_id, harness=rt.harness,
                     status=rt.status, message_images=rt.message_images,
                     function_result_images=rt.function_result_images)
        elif rt.incarnation is not None and prev.incarnation not in (None, rt.incarnation):
            # the same Runtime, another process: the sweeper fails the Turns the last one ran
            log.info("registry.runtime_restarted", runtime_id=rt.runtime_id,
                     incarnation=rt.incarnation, before=prev.incarnation)
        self.on_change(rt)

    async def polled(self) -> None:
        """Caught up = every partition answered a fetch lately and nothing is left behind
        its high-water mark; the oldest of those answers is when that was true."""
        assert self.consumer is not None
        answered: list[float] = []
        for tp in self.consumer.assignment():
            polled_ms = self.consumer.last_poll_timestamp(tp)
            highwater = self.consumer.highwater(tp)
            if polled_ms is None or highwater is None:
                return
            if await self.consumer.position(tp) < highwater:
                return
            answered.append(polled_ms / 1000.0)
        if answered:
            self.clock.caught_up(min(answered))

    def seen(self, now: datetime) -> Mapping[str, RuntimeInfo]:
        return as_seen(self.runtimes, self.clock, now)


def as_seen(runtimes: Mapping[str, RuntimeInfo], clock: ReadingClock,
            now: datetime) -> Mapping[str, RuntimeInfo]:
    """The Runtimes as liveness should judge them: a heartbeat counts from no earlier than the
    clock's floor."""
    floor = clock.floor(now.timestamp())
    if floor is None:
        return runtimes
    at = datetime.fromtimestamp(floor, UTC)
    return {rid: rt if rt.heartbeat_at >= at else dataclasses.replace(rt, heartbeat_at=at)
            for rid, rt in runtimes.items()}

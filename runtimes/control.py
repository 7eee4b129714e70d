"""``runtime.control``: read from the beginning without a group; a Runtime's switch state and
status are the fold of every control record addressed to it, applied before the first
delivery."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiokafka import AIOKafkaConsumer

from runtimes.deliveries import FETCH_MAX_WAIT_MS, Batches, DeadLetter, read_forever
from runtimes.harness import SimulatedHarness
from runtimes.registration import STATUSES
from shared.domain.poison import UNPROCESSABLE, Poison
from shared.kafka import assigned_consumer
from shared.logging import get_logger
from shared.messages import decode
from shared.settings import Settings

log = get_logger(__name__)

Apply = Callable[[Any], Awaitable[bool]]


async def control_consumer(settings: Settings, topic: str) -> AIOKafkaConsumer:
    """Every partition of ``topic`` from the beginning, without a group."""
    return await assigned_consumer(settings, topic, at_end=False,
                                   fetch_max_wait_ms=FETCH_MAX_WAIT_MS)


async def catch_up(c: AIOKafkaConsumer, apply: Apply) -> None:
    """Apply every control record up to the end offsets found now."""
    ends = await c.end_offsets(list(c.assignment()))
    while True:
        behind = [tp for tp, end in ends.items() if await c.position(tp) < end]
        if not behind:
            return
        batches = await c.getmany(timeout_ms=200)
        for recs in batches.values():
            for r in recs:
                await apply(r)


async def follow(c: AIOKafkaConsumer, apply: Apply,
                 changed: Callable[[], Awaitable[None]]) -> None:
    """Apply control records as they come; ``changed`` after a batch that changed anything."""
    async def on_batch(batches: Batches) -> None:
        any_change = False
        for recs in batches.values():
            for r in recs:
                any_change |= await apply(r)
        if any_change:
            await changed()

    await read_forever(c, on_batch, log, "runtime.control_error")


async def apply_control(r: Any, runtime_id: str, harness: SimulatedHarness, status: str,
                        dead_letter: DeadLetter) -> str | None:
    """One control record: the switches applied to ``harness`` and the status in force after
    it, or ``None`` when it changed nothing (another Runtime's, or bad: a bad record addressed
    to this Runtime is dead-lettered)."""
    got = decode.CONTROL.decode(r.value or b"")
    if isinstance(got, Poison):
        if r.key == runtime_id.encode():
            await dead_letter(r, got)
        return None
    if got.model.runtime_id != runtime_id:
        return None
    changes = dict(got.model.set)
    new_status = changes.pop("status", None)
    try:
        switches = harness.switches.updated(changes)
        if new_status is not None and new_status not in STATUSES[:2]:
            raise ValueError(f"status must be ready or draining, got {new_status!r}")
    except ValueError as exc:
        log.warning("control.ignored", reason=str(exc))
        await dead_letter(r, Poison(UNPROCESSABLE, str(exc)[:300]))
        return None
    harness.set_switches(switches)
    if new_status is not None:
        status = str(new_status)
    log.info("control.applied", switches=switches.active(), status=status)
    return status

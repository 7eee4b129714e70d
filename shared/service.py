"""What every service process shares: records decoded into their topic's schemas (anything else
goes to the DLQ with its reason, never into a handler) and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import suppress
from typing import Any, TypeAlias, TypeVar

from aiokafka.structs import ConsumerRecord

from shared.domain.poison import UNEXPECTED_SCHEMA, Poison
from shared.kafka import DeadLetters
from shared.logging import get_logger
from shared.messages.decode import Decoded, RecordType

log = get_logger(__name__)


async def raw_decoder(msg: Any) -> Any:
    """Consumers decode records themselves so a malformed one goes to the DLQ with its reason
    instead of failing inside the framework."""
    return msg.body


Raw: TypeAlias = "ConsumerRecord[bytes, bytes]"
T = TypeVar("T")


async def decode_records(
    dlq: DeadLetters, raws: tuple[Raw, ...] | Any, types: Mapping[str, RecordType[Any]],
) -> list[tuple[Raw, Decoded[Any]]]:
    """The records of a batch decoded with their topic's model (``shared.messages.decode``); every
    other one goes to its topic's DLQ with the reason, and the batch goes on without it."""

    def decode(r: Raw) -> Decoded[Any] | Poison:
        kind = types.get(r.topic)
        if kind is None:
            return Poison(UNEXPECTED_SCHEMA, f"this consumer reads nothing from {r.topic}")
        return kind.decode(r.value or b"")

    return await _sift(dlq, raws, decode)


def records_of(raws: tuple[Raw, ...] | Any) -> tuple[Raw, ...]:
    """A message's records: a batch subscriber's come as a tuple, any other's as one record."""
    return raws if isinstance(raws, tuple) else (raws,)


async def _sift(dlq: DeadLetters, raws: tuple[Raw, ...] | Any,
                decode: Callable[[Raw], T | Poison]) -> list[tuple[Raw, T]]:
    """Each record with what ``decode`` made of it; a poisoned one to the DLQ instead."""
    out = []
    for r in records_of(raws):
        got = decode(r)
        if isinstance(got, Poison):
            await dlq.record(r, got)
            continue
        out.append((r, got))
    return out


async def cancel(task: asyncio.Task[Any] | None) -> None:
    """Cancels ``task`` (if any) and waits until it has ended."""
    if task is not None:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancels every one of ``tasks``, then waits until each has ended."""
    for t in tasks:
        t.cancel()
    for t in tasks:
        with suppress(asyncio.CancelledError):
            await t


def settle_heap() -> None:
    """After start-up: what it built (modules, schemas, clients, topic metadata) lives as long
    as the process, so it is moved out of the collector's reach (``gc.freeze``). A full
    collection walks every tracked object and stops the event loop meanwhile — every request
    in flight waits: at ~130 000 objects, 50–120 ms every few seconds under load on the 2-core
    machine (docs/benchmarks.md, "Collector pauses")."""
    gc.collect()
    gc.freeze()


# One step of a service's stop (a Kafka client's, the store client's close) gets this long. A
# step still running then is logged with where it waits, and cancelled: the stop goes on, so the
# process exits within its grace period (the chart's 30 s) instead of being killed with the
# rest of its stop undone.
STOP_STEP_S = 5.0


class StopSteps:
    """Runs the steps of a service's stop one after another, each within ``budget`` seconds,
    timing each, so a slow stop names the step that held it (``service.stop_steps``)."""

    def __init__(self, budget: float = STOP_STEP_S) -> None:
        self.budget = budget
        self.took: dict[str, float] = {}

    async def run(self, name: str, step: Coroutine[Any, Any, Any]) -> None:
        t0 = time.monotonic()
        task = asyncio.ensure_future(step)
        try:
            done, _ = await asyncio.wait({task}, timeout=self.budget)
            if done:
                task.result()
                return
            frames = [f"{f.f_code.co_filename}:{f.f_lineno} {f.f_code.co_name}"
                      for f in task.get_stack(limit=20)]
            log.warning("service.stop_step_overdue", step=name, after_s=self.budget,
                        waiting_in=frames)
            task.cancel()
            await asyncio.wait({task}, timeout=1.0)
        finally:
            self.took[name] = round(time.monotonic() - t0, 3)

    def log(self) -> None:
        log.info("service.stop_steps", steps_s=self.took)  # (the service is bound: logging)


async def run_until_stopped(
    start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]],
    ready: Callable[[], None] | None = None,
) -> None:
    """Start, settle the heap, call ``ready`` (if given), serve until SIGTERM/SIGINT, stop."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError):
            loop.add_signal_handler(sig, stopping.set)
    await start()
    settle_heap()
    log.info("service.running", event_loop=type(loop).__module__.split(".")[0])
    if ready is not None:
        ready()
    try:
        await stopping.wait()
    finally:
        log.info("service.stopping")
        t0 = loop.time()
        await stop()
        log.info("service.stopped", stop_s=round(loop.time() - t0, 3))

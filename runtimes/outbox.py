"""The Runtime's observations out: ``runtime.observation/1`` records keyed by Core
``session_id``, through one ordered queue so a Turn's records leave in the order the harness made
them, on an acks=all idempotent producer.

With ``hold_s`` (the real harnesses), a record that carries no fact Core acts on — by the
harness's own classification (``shared.domain.observations``): not a function call, not a
Turn's end, not a refusal — may wait for the records behind it until the harness has printed
nothing for ``hold_s`` (at most ``HOLD_MAX_S`` after the first), and they leave together: a
Turn's ``turn/started`` / ``item/started`` / ``item/completed`` lines, printed milliseconds
apart, become one produce request and one fetch on Core's side instead of one each, while the
binary is working on the same machine. A fact record never waits, and sends whatever waits
ahead of it (docs/harnesses.md, Bench)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from aiokafka import AIOKafkaProducer
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from runtimes.harness import Emit
from runtimes.traces import TRACES
from shared import tracing
from shared.domain.observations import classify_all
from shared.kafka import encode, make_producer, now_rfc3339
from shared.logging import get_logger
from shared.settings import Settings

log = get_logger(__name__)

# How long the harness may be quiet before records without a fact leave (live Runtimes): longer
# than the pauses inside a short Turn (an instant model's Turn prints its lines over ~25–35 ms),
# so such a Turn's records leave as one produce request, read with one fetch. The wait restarts
# with each record: a line printed after a Turn's end (Claude Code's ``command_lifecycle``
# ``completed``) leaves with the next Turn's lines if that Turn follows within ``HOLD_S``, not
# alone in the middle of it. ``HOLD_MAX_S`` bounds the wait of the first record
# (docs/harnesses.md, Bench).
HOLD_S = 0.05
HOLD_MAX_S = 0.2


def runtime_producer(settings: Settings, runtime_id: str) -> AIOKafkaProducer:
    """A plain producer (``shared.kafka.make_producer``: acks=all, idempotent): ``send`` only
    queues, so a Turn's records go out in order without waiting for each acknowledgement;
    ``flush`` waits for them before offsets are committed. No linger: aiokafka keeps one produce
    request in flight per broker, so records printed while one is in flight still leave together
    in the next; a linger would only hold every first record (a Turn's end, a receipt) back
    (docs/harnesses.md, Bench)."""
    return make_producer(settings, f"runtime-{runtime_id}", linger_ms=0)


class ObservationOutbox:
    """``enqueue`` from the harness (simulated or live), ``run`` publishes in order."""

    def __init__(self, producer: AIOKafkaProducer, topic: str, hold_s: float = 0.0) -> None:
        self.producer = producer
        self.topic = topic
        self.hold_s = hold_s
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.timers: list[asyncio.TimerHandle] = []
        self.published = 0
        # tracing on: id() of each queued record → the context its ``send`` span goes on in
        self.parents: dict[int, Context | None] = {}

    def enqueue(self, emits: list[Emit]) -> None:
        """Queue records in order; consecutive records with the same delay leave together."""
        if TRACES.tracer is not None:
            for e in emits:
                self.parents[id(e.record)] = TRACES.parent_of(str(e.record.get("session_id")))
        i = 0
        while i < len(emits):
            delay = emits[i].delay_s
            j = i
            while j < len(emits) and emits[j].delay_s == delay:
                j += 1
            group = [e.record for e in emits[i:j]]
            if delay <= 0:
                for rec in group:
                    self.queue.put_nowait(rec)
            else:
                loop = asyncio.get_running_loop()
                self.timers.append(loop.call_later(delay, self._put_all, group))
            i = j

    def _put_all(self, group: list[dict[str, Any]]) -> None:
        for rec in group:
            self.queue.put_nowait(rec)

    async def run(self) -> None:
        while True:
            batch = await self._next()
            for rec in batch:
                try:
                    if TRACES.tracer is None:
                        fut = await self.producer.send(self.topic, encode(rec),
                                                       key=str(rec["session_id"]).encode())
                    else:
                        fut = await self._send_traced(TRACES.tracer, rec)
                    fut.add_done_callback(_log_send_failure)
                    self.published += 1
                except Exception:
                    log.exception("observation.publish_failed", session_id=rec.get("session_id"))
                finally:
                    self.queue.task_done()

    async def _send_traced(self, tracer: Tracer, rec: dict[str, Any]) -> asyncio.Future[Any]:
        """``send runtime.observations`` in the trace of the native call it came from."""
        key = str(rec["session_id"]).encode()
        span, headers = tracing.start_send(tracer, self.topic, key, self.parents.pop(id(rec), None))
        try:
            fut: asyncio.Future[Any] = await self.producer.send(self.topic, encode(rec), key=key,
                                                                headers=headers)
        except BaseException as exc:
            tracing.fail(span, exc)
            span.end()
            raise
        fut.add_done_callback(tracing.end_on_ack(span))
        return fut

    async def _next(self) -> list[dict[str, Any]]:
        """The next record, and (``hold_s``) the ones that follow it, each within ``hold_s`` of
        the one before and all within ``HOLD_MAX_S`` of the first, until one carries a fact;
        each stamped ``observed_at`` as it is taken from the queue."""
        batch = [_stamped(await self.queue.get())]
        if self.hold_s <= 0:
            return batch
        loop = asyncio.get_running_loop()
        cap = loop.time() + max(self.hold_s, HOLD_MAX_S)
        while not _carries_fact(batch[-1]) and (
                left := min(self.hold_s, cap - loop.time())) > 0:
            try:
                batch.append(_stamped(await asyncio.wait_for(self.queue.get(), left)))
            except TimeoutError:
                break
        return batch

    async def sent(self) -> None:
        """Until every queued record is handed to the producer."""
        await self.queue.join()

    async def flush(self, timeout_s: float) -> None:
        """Every queued record handed to the producer, then acked; each step waits
        ``timeout_s`` at the most (one that overruns ends the flush: a stop goes on)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.sent(), timeout_s)
            await asyncio.wait_for(self.producer.flush(), timeout_s)

    def cancel_timers(self) -> None:
        for h in self.timers:
            h.cancel()


def _stamped(rec: dict[str, Any]) -> dict[str, Any]:
    rec["observed_at"] = now_rfc3339()
    return rec


def _carries_fact(rec: dict[str, Any]) -> bool:
    """A function call or a Turn's end (the harness's classification), or a refusal."""
    native = rec.get("native")
    return native is None or bool(classify_all(str(rec.get("harness")), native))


def _log_send_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("observation.publish_failed", error=repr(fut.exception()))

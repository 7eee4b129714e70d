"""The Runtime's delivery loop: ``runtime.deliveries`` in its own consumer group
``session-core-runtime-<runtime_id>`` (``auto_offset_reset=earliest``: a fresh group reads what
was sent before it joined, a restarted one resumes at its committed offset). It keeps only the
records for its ``runtime_id``, hands each to the harness and commits its offsets once the loop is
idle — after the observations queued by then are published (at least once)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer
from opentelemetry import trace

from runtimes.harness import Emit, SimulatedHarness
from runtimes.live import LiveHarness, refusal
from runtimes.outbox import ObservationOutbox
from runtimes.registration import consumer_group
from runtimes.traces import TRACES
from shared import sealing, tracing
from shared.domain.poison import Poison
from shared.kafka import client_security, max_record_bytes
from shared.logging import bound, get_logger
from shared.messages import decode
from shared.sealing import KeyPair
from shared.settings import Settings
from shared.topics import Topics

log = get_logger(__name__)

# How long the broker holds an empty fetch. A record ends the wait at once (the long poll
# returns on data, and aiokafka sends no fetch to a broker while fetched records wait to be
# read), so this bounds only the idle polling: 2 fetches a second per consumer, not 20, while
# the harness works on the same machine (docs/harnesses.md, Bench).
FETCH_MAX_WAIT_MS = 500

# Offsets are committed when a poll comes back empty (the loop is idle), or after this long with
# deliveries still arriving. Not after every batch: the commit's round trip then ran while the
# harness started the delivery's Turn — the delivery loop sent it before the Session's worker
# had written the input to the harness — on every Turn (docs/harnesses.md, Bench). What a crash
# can redeliver grows from one batch to this window; deliveries carry their ``delivery_id`` for
# that (at least once, as before), and the ``incarnation`` of the process they were sent to: a
# restarted process skips what its dead predecessor read (``DeliveryLoop.handle_raw``).
COMMIT_AFTER_S = 1.0

Handle = Callable[[Mapping[str, Any]], Awaitable[None]]
DeadLetter = Callable[[Any, Poison], Awaitable[None]]
Batches = Mapping[Any, list[Any]]  # what ``getmany`` returns: partition → its records


async def read_forever(consumer: AIOKafkaConsumer, on_batch: Callable[[Batches], Awaitable[None]],
                       logger: Any, error_event: str) -> None:
    """Poll ``consumer`` (250 ms) and hand each batch, empty or not, to ``on_batch`` until
    cancelled; an error is logged on ``logger`` as ``error_event`` and the poll retried 0.5 s
    later."""
    while True:
        try:
            await on_batch(await consumer.getmany(timeout_ms=250))
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception(error_event)
            await asyncio.sleep(0.5)


def deliveries_consumer(settings: Settings, topics: Topics, runtime_id: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(
        topics.runtime_deliveries,
        bootstrap_servers=settings.kafka_bootstrap_servers,
        group_id=topics.group(consumer_group(runtime_id)),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=max_record_bytes(settings),
        fetch_max_bytes=max_record_bytes(settings) * 2,
        fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
        **client_security(settings),
    )


def to_harness(live: LiveHarness | None, harness: SimulatedHarness, clock: Callable[[], float],
               enqueue: Callable[[list[Emit]], None]) -> Handle:
    """Where a delivery goes: the live harness, which writes to its process and returns (what
    the harness prints comes back through ``enqueue``, its ``emit``, in the order it was
    printed), else the simulated harness, whose records are queued at once."""
    async def handle(delivery: Mapping[str, Any]) -> None:
        if live is not None:
            await live.handle(delivery)  # its session worker makes the native call's span
            return
        native = TRACES.start_native(delivery, "simulated")
        if native is None:
            enqueue(harness.handle(delivery, clock()))
            return
        with trace.use_span(native, end_on_exit=True):
            enqueue(harness.handle(delivery, clock()))
    return handle


@dataclass(eq=False)
class DeliveryLoop:
    """``handle`` gets each delivery addressed to this Runtime; a poison record keyed by this
    Runtime goes to ``dead_letter`` (every Runtime reads the whole topic, so only the Runtime
    a record is addressed to dead-letters it); ``ready`` is set once partitions are assigned."""

    consumer: AIOKafkaConsumer
    runtime_id: str
    handle: Handle
    outbox: ObservationOutbox
    ready: asyncio.Event
    dead_letter: DeadLetter
    harness: str = ""
    keys: KeyPair | None = None  # sealed deliveries: this Runtime's key pair (shared/sealing.py)
    incarnation: str | None = None  # this process's registered id: deliveries for another skip
    clock: Callable[[], float] = time.monotonic
    uncommitted_since: float | None = None  # the first batch not committed yet

    async def run(self) -> None:
        await read_forever(self.consumer, self.on_batch, log, "runtime.deliveries_error")

    async def on_batch(self, batches: Batches) -> None:
        consumer = self.consumer
        if not self.ready.is_set() and consumer.assignment():
            self.ready.set()
        handled = 0
        for recs in batches.values():
            for r in recs:
                handled += await self.handle_raw(r)
        if batches and self.uncommitted_since is None:
            self.uncommitted_since = self.clock()
        if self.uncommitted_since is not None and (
                not batches or self.clock() - self.uncommitted_since >= COMMIT_AFTER_S):
            await self.commit()
        if handled:
            log.debug("deliveries.handled", count=handled)

    async def commit(self) -> None:
        """Commit what was read, once the observations queued so far are published."""
        await self.outbox.sent()
        await self.outbox.producer.flush()
        await self.consumer.commit()
        self.uncommitted_since = None

    async def commit_read(self, timeout_s: float) -> None:
        """On a clean stop: what was read and handed over, committed, so it does not come
        again (at most ``timeout_s``; a failure is logged)."""
        if self.uncommitted_since is not None:
            try:
                await asyncio.wait_for(self.commit(), timeout_s)
            except Exception:
                log.exception("runtime.commit_failed")

    async def handle_raw(self, r: Any) -> int:
        got = decode.DELIVERY.decode(r.value or b"")
        if isinstance(got, Poison):
            if r.key == self.runtime_id.encode():
                await self.dead_letter(r, got)
            return 0
        if got.model.runtime_id != self.runtime_id:
            return 0
        value = got.value
        sent_to = got.model.incarnation
        if sent_to is not None and self.incarnation is not None and sent_to != self.incarnation:
            # Sent to another process of this Runtime: a predecessor that died after reading it
            # (not committed yet) or before. Run again here it would repeat what that process
            # may have run, a second native Turn for a Turn Core has ended; the dispatcher
            # fails every Turn the predecessor left running (``Binder.restarts``).
            log.info("delivery.other_process", session_id=value.get("session_id"),
                     delivery_id=value.get("delivery_id"), kind=value.get("kind"),
                     sent_to=sent_to, incarnation=self.incarnation)
            return 1
        if sealing.is_sealed(value):
            opened = self.unseal(value)
            if opened is None:
                return 1
            value = opened
        with bound(session_id=value.get("session_id"), delivery_id=value.get("delivery_id"),
                   call_id=value.get("call_id")), tracing.consuming(TRACES.tracer, r):
            if TRACES.tracer is not None:
                TRACES.received(value)  # the native call's parent (traces.py)
            log.info("delivery.received", kind=value.get("kind"), turn_id=value.get("turn_id"))
            await self.handle(value)
        return 1


    def unseal(self, delivery: dict[str, Any]) -> dict[str, Any] | None:
        """A sealed delivery opened with this Runtime's key; one it cannot open (no key, sealed
        to another, altered) is refused — Core fails its Turn and learns why — never run."""
        try:
            if self.keys is None:
                raise sealing.SealError("sealed, and this Runtime has no sealing key")
            return sealing.unseal(delivery, self.keys)
        except sealing.SealError as exc:
            log.warning("delivery.unsealable", session_id=delivery.get("session_id"),
                        delivery_id=delivery.get("delivery_id"), reason=str(exc))
            call_id = delivery.get("call_id")
            self.outbox.enqueue([Emit(refusal(
                self.runtime_id, self.harness, delivery, f"unsealable: {exc}",
                call_id if isinstance(call_id, str) else None))])
            return None


async def idle_ticks(harness: SimulatedHarness, clock: Callable[[], float],
                     enqueue: Callable[[list[Emit]], None]) -> None:
    """The simulated harness's clock: every 50 ms, the Turns that went idle end."""
    while True:
        await asyncio.sleep(0.05)
        enqueue(harness.tick(clock()))

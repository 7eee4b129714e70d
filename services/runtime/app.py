"""The reference Runtime process: Kafka in and out around the pure ``SimulatedHarness``.

* registers on ``runtime.registrations`` (compacted, keyed by ``runtime_id``) at start, every
  ``heartbeat_s`` and whenever its switches or status change; ``status: "gone"`` on a clean stop;
* consumes ``runtime.deliveries`` in its own consumer group ``session-core-runtime-<runtime_id>``
  (``auto_offset_reset=earliest``: a fresh group reads what was sent before it joined, a
  restarted one resumes at its committed offset), keeps only records for its ``runtime_id`` and
  commits a batch after the observations it caused are published (at least once);
* publishes ``runtime.observation/1`` records keyed by Core ``session_id``, through one ordered
  queue so a Turn's records leave in the order the harness made them;
* reads ``runtime.control`` from the beginning without a group (the switch state is the fold
  of every control record for this runtime, applied before the first delivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from services.runtime.harness import Emit, SimulatedHarness
from services.runtime.live import LiveHarness
from services.runtime.switches import Switches
from shared import records, typedrecords
from shared.domain.harnesses.claude_code import BRIDGE_PROTOCOL
from shared.domain.poison import UNPROCESSABLE, Poison
from shared.kafka import (
    DeadLetters,
    assigned_consumer,
    client_security,
    encode,
    ensure_topics,
    max_record_bytes,
    now_rfc3339,
)
from shared.logging import bound, get_logger
from shared.settings import Settings
from shared.topics import topics_for

log = get_logger(__name__)

STATUSES = ("ready", "draining", "gone")
# How long the broker holds an empty fetch. A record ends the wait at once (the long poll
# returns on data, and aiokafka sends no fetch to a broker while fetched records wait to be
# read), so this bounds only the idle polling: 2 fetches a second per consumer, not 20, while
# the harness works on the same machine (docs/harnesses.md, Bench).
FETCH_MAX_WAIT_MS = 500


@dataclass
class RuntimeConfig:
    runtime_id: str
    harness: str
    placements: list[str] = field(default_factory=lambda: ["none", "self_hosted"])
    bridge_protocol: int = BRIDGE_PROTOCOL
    message_images: bool = True
    function_result_images: bool = True
    status: str = "ready"
    heartbeat_s: float = 3.0
    turn_idle_s: float = 1.5
    switches: Switches = field(default_factory=Switches)


def registration(config: RuntimeConfig, harness: SimulatedHarness, status: str,
                 live: LiveHarness | None = None) -> dict[str, Any]:
    """The ``runtime.registration/1`` record (CONTRACT §2) plus informative extras:
    ``switches`` (the misbehaviour switches in force), ``turn_idle_ms`` and ``engine``
    (``simulated`` or ``real``). A real engine reports the capabilities of its harness and model
    configuration (``LiveHarness.capabilities``)."""
    caps = live.capabilities() if live is not None else {
        "message_images": harness.message_images,
        "function_result_images": harness.function_result_images,
    }
    return records.registration_record(
        runtime_id=config.runtime_id,
        harness=config.harness,
        bridge_protocol=config.bridge_protocol,
        placements=list(config.placements),
        message_images=bool(caps.get("message_images")),
        function_result_images=bool(caps.get("function_result_images")),
        status=status,
        heartbeat_at=now_rfc3339(),
        switches=harness.switches.active() if live is None else {},
        turn_idle_ms=int(config.turn_idle_s * 1000),
        engine="simulated" if live is None else "real",
    )


def consumer_group(runtime_id: str) -> str:
    return f"session-core-runtime-{runtime_id}"


class RuntimeService:
    def __init__(self, settings: Settings, config: RuntimeConfig,
                 clock: Callable[[], float] = time.monotonic,
                 live: LiveHarness | None = None) -> None:
        self.settings = settings
        self.config = config
        self.topics = topics_for(settings)
        self.clock = clock
        self.harness = SimulatedHarness(
            runtime_id=config.runtime_id,
            harness=config.harness,
            switches=config.switches,
            turn_idle_s=config.turn_idle_s,
            message_images=config.message_images,
            function_result_images=config.function_result_images,
        )
        # The real engine (``--engine real``): a live harness driving real harness processes
        # replaces the simulation; the Kafka loop around it is the same.
        self.live = live
        self.status = config.status
        # A plain producer (acks=all, idempotent, like shared.kafka.make_broker's): ``send``
        # only queues, so a Turn's records go out in order without waiting for each
        # acknowledgement; ``flush`` waits for them before offsets are committed. No linger:
        # aiokafka keeps one produce request in flight per broker, so records printed while
        # one is in flight still leave together in the next; a linger would only hold every
        # first record (a Turn's end, a receipt) back (docs/harnesses.md, Bench).
        self.producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap_servers,
            client_id=f"runtime-{config.runtime_id}",
            acks="all",
            enable_idempotence=True,
            linger_ms=0,
            max_request_size=max_record_bytes(settings),
            **client_security(settings),
        )
        self._out: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._consumers: list[AIOKafkaConsumer] = []
        self._timers: list[asyncio.TimerHandle] = []
        self.ready = asyncio.Event()
        self.published = 0
        self.dlq = DeadLetters(self._send, self.topics)

    async def _send(self, topic: str, value: bytes, key: bytes | None) -> Any:
        return await self.producer.send_and_wait(topic, value, key=key)

    def _mine(self, key: bytes | None) -> bool:
        """Deliveries and control records are keyed by runtime_id: of a poison record, only
        the Runtime it is addressed to dead-letters it (every Runtime reads the whole topic)."""
        return key == self.config.runtime_id.encode()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await self.producer.start()
        self._tasks.append(asyncio.create_task(self._publisher(), name="runtime:publisher"))
        if self.live is not None:
            await self.live.start(self.enqueue)
        control = await self._assigned_consumer(self.topics.runtime_control)
        await self._catch_up_control(control)
        self._tasks.append(asyncio.create_task(self._control(control), name="runtime:control"))
        deliveries = AIOKafkaConsumer(
            self.topics.runtime_deliveries,
            bootstrap_servers=self.settings.kafka_bootstrap_servers,
            group_id=self.topics.group(consumer_group(self.config.runtime_id)),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_partition_fetch_bytes=max_record_bytes(self.settings),
            fetch_max_bytes=max_record_bytes(self.settings) * 2,
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            **client_security(self.settings),
        )
        await deliveries.start()
        self._consumers.append(deliveries)
        await self.register()
        self._tasks.append(asyncio.create_task(self._deliveries(deliveries), name="runtime:in"))
        self._tasks.append(asyncio.create_task(self._heartbeat(), name="runtime:heartbeat"))
        if self.live is None:
            self._tasks.append(asyncio.create_task(self._ticker(), name="runtime:idle"))
        log.info("runtime.started", runtime_id=self.config.runtime_id,
                 harness=self.config.harness, switches=self.harness.switches.active(),
                 engine="simulated" if self.live is None else "real")

    async def stop(self) -> None:
        for h in self._timers:
            h.cancel()
        for t in self._tasks:
            if t.get_name() != "runtime:publisher":
                t.cancel()
        for t in self._tasks:
            if t.get_name() != "runtime:publisher":
                with contextlib.suppress(asyncio.CancelledError):
                    await t
        if self.live is not None:
            try:
                await self.live.stop()
            except Exception:
                log.exception("runtime.live_stop_failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._out.join(), 5)
            await asyncio.wait_for(self.producer.flush(), 5)
        with contextlib.suppress(Exception):
            await self._publish_registration("gone")
        for t in self._tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for c in self._consumers:
            await c.stop()
        await self.producer.stop()
        log.info("runtime.stopped", runtime_id=self.config.runtime_id)

    async def register(self) -> None:
        await self._publish_registration(self.status)

    async def _publish_registration(self, status: str) -> None:
        rec = registration(self.config, self.harness, status, self.live)
        await self.producer.send_and_wait(self.topics.runtime_registrations, encode(rec),
                                          key=self.config.runtime_id.encode())

    # ------------------------------------------------------------------ loops

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            try:
                await self.register()
            except Exception:
                log.exception("runtime.heartbeat_failed")

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            self.enqueue(self.harness.tick(self.clock()))

    async def _deliveries(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=250)
                if not self.ready.is_set() and consumer.assignment():
                    self.ready.set()
                handled = 0
                for recs in batches.values():
                    for r in recs:
                        handled += await self._handle_raw(r)
                if batches:
                    await self._out.join()  # observations out before the offsets move on
                    await self.producer.flush()
                    await consumer.commit()
                if handled:
                    log.debug("deliveries.handled", count=handled)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("runtime.deliveries_error")
                await asyncio.sleep(0.5)

    async def _handle_raw(self, r: Any) -> int:
        got = typedrecords.DELIVERY.decode(r.value or b"")
        if isinstance(got, Poison):
            if self._mine(r.key):
                await self.dlq.record(r, got)
            return 0
        if got.model.runtime_id != self.config.runtime_id:
            return 0
        value = got.value
        with bound(session_id=value.get("session_id"), delivery_id=value.get("delivery_id"),
                   call_id=value.get("call_id")):
            log.info("delivery.received", kind=value.get("kind"), turn_id=value.get("turn_id"))
            if self.live is not None:
                # The live harness writes to its process and returns; what the harness prints
                # comes back through ``enqueue`` (its ``emit``) in the order it was printed.
                await self.live.handle(value)
            else:
                self.enqueue(self.harness.handle(value, self.clock()))
        return 1

    def enqueue(self, emits: list[Emit]) -> None:
        """Queue records in order; consecutive records with the same delay leave together."""
        i = 0
        while i < len(emits):
            delay = emits[i].delay_s
            j = i
            while j < len(emits) and emits[j].delay_s == delay:
                j += 1
            group = [e.record for e in emits[i:j]]
            if delay <= 0:
                for rec in group:
                    self._out.put_nowait(rec)
            else:
                loop = asyncio.get_running_loop()
                self._timers.append(loop.call_later(delay, self._put_all, group))
            i = j

    def _put_all(self, group: list[dict[str, Any]]) -> None:
        for rec in group:
            self._out.put_nowait(rec)

    async def _publisher(self) -> None:
        while True:
            rec = await self._out.get()
            try:
                rec["observed_at"] = now_rfc3339()
                fut = await self.producer.send(self.topics.runtime_observations, encode(rec),
                                               key=str(rec["session_id"]).encode())
                fut.add_done_callback(_log_send_failure)
                self.published += 1
            except Exception:
                log.exception("observation.publish_failed", session_id=rec.get("session_id"))
            finally:
                self._out.task_done()

    # ------------------------------------------------------------------ control

    async def _assigned_consumer(self, topic: str) -> AIOKafkaConsumer:
        c = await assigned_consumer(self.settings, topic, at_end=False,
                                    fetch_max_wait_ms=FETCH_MAX_WAIT_MS)
        self._consumers.append(c)
        return c

    async def _catch_up_control(self, c: AIOKafkaConsumer) -> None:
        ends = await c.end_offsets(list(c.assignment()))
        while True:
            behind = [tp for tp, end in ends.items() if await c.position(tp) < end]
            if not behind:
                return
            batches = await c.getmany(timeout_ms=200)
            for recs in batches.values():
                for r in recs:
                    await self._apply_control(r)

    async def _control(self, c: AIOKafkaConsumer) -> None:
        while True:
            try:
                batches = await c.getmany(timeout_ms=250)
                changed = False
                for recs in batches.values():
                    for r in recs:
                        changed |= await self._apply_control(r)
                if changed:
                    await self.register()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("runtime.control_error")
                await asyncio.sleep(0.5)

    async def _apply_control(self, r: Any) -> bool:
        got = typedrecords.CONTROL.decode(r.value or b"")
        if isinstance(got, Poison):
            if self._mine(r.key):
                await self.dlq.record(r, got)
            return False
        if got.model.runtime_id != self.config.runtime_id:
            return False
        changes = dict(got.model.set)
        status = changes.pop("status", None)
        try:
            switches = self.harness.switches.updated(changes)
            if status is not None and status not in STATUSES[:2]:
                raise ValueError(f"status must be ready or draining, got {status!r}")
        except ValueError as exc:
            log.warning("control.ignored", reason=str(exc))
            await self.dlq.record(r, Poison(UNPROCESSABLE, str(exc)[:300]))
            return False
        self.harness.set_switches(switches)
        if status is not None:
            self.status = str(status)
        log.info("control.applied", switches=switches.active(), status=self.status)
        return True


def _log_send_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("observation.publish_failed", error=repr(fut.exception()))

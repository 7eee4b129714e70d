"""dispatcher — binds Sessions to Runtimes by reported capability and delivers their input over
the Core–Runtime wire (``runtime.deliveries``). This module wires it up: the consumers of
``session.stored`` and ``runtime.observations``, the Runtime registry tail, the sweeper loop
(one replica at a time, under a lease). The rules are the binder's (``binder.py``), the
state the repository's (``repository.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from faststream.kafka.annotations import KafkaMessage

from services.dispatcher.binder import Binder
from services.dispatcher.domain.binding import RuntimeInfo
from services.dispatcher.outbox import KafkaOutbox
from services.dispatcher.registry import RegistryTail
from services.dispatcher.repository import DispatcherRepository
from shared import tracing
from shared.coreservice import CoreService
from shared.domain.poison import NOT_BOUND, Poison
from shared.failures import settle
from shared.ids import new_id
from shared.kafka import broker_ping, ensure_topics
from shared.logging import bound, get_logger
from shared.messages import decode
from shared.metrics import set_ready_runtimes, set_runtimes
from shared.service import StopSteps, cancel, decode_records
from shared.settings import Settings
from shared.store import ping

log = get_logger(__name__)
GROUP = "session-core-dispatcher"
LEASE = "dispatcher-sweeper"


class DispatcherService(CoreService):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, GROUP, "dispatcher")
        self.repo = DispatcherRepository(self.db)
        self.instance = new_id("rt").replace("rt_", "dsp_")
        self.types: decode.TopicTypes = {
            self.topics.session_stored: decode.STORED,
            self.topics.runtime_observations: decode.OBSERVATION}
        self.registry = RegistryTail(settings, self.topics.runtime_registrations, self._changed,
                                     self.dlq)
        self.binder = Binder(
            self.repo, self.registry,
            KafkaOutbox(self.broker, self.topics.core_facts, self.topics.runtime_deliveries,
                        self.tracer),
            heartbeat_timeout_s=settings.runtime_heartbeat_timeout_s,
            binding_wait_timeout_s=settings.binding_wait_timeout_s, clock=time.time,
            seal_key=settings.seal_key,
            require_sealing=settings.require_sealed_deliveries)
        self.lock = asyncio.Lock()  # one decision at a time per replica
        self.wake = asyncio.Event()
        self.sweeper: asyncio.Task[None] | None = None
        for topic, group, handler in (
                (self.topics.session_stored, GROUP, self.on_stored),
                (self.topics.runtime_observations, f"{GROUP}-observations", self.on_observation)):
            self.subscriber(topic, group=group)(handler)

    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await self.repo.ensure_indexes()
        await self.registry.start()
        await self.broker.start()
        self.sweeper = asyncio.create_task(self._sweep_loop(), name="dispatcher-sweeper")
        log.info("dispatcher.started", group=GROUP)

    async def stop(self) -> None:
        steps = StopSteps()
        await steps.run("sweeper", cancel(self.sweeper))
        await steps.run("subscribers", self.broker.stop())
        await steps.run("registry", self.registry.stop())
        await steps.run("store", self.client.close())
        steps.log()

    async def ready(self) -> bool:
        return (self.registry.ready.is_set() and await ping(self.client)
                and await broker_ping(self.broker))

    def _changed(self, rt: RuntimeInfo) -> None:
        set_runtimes(self.registry.runtimes.values())
        self.wake.set()

    async def on_stored(self, body: Any, msg: KafkaMessage) -> None:
        for raw, got in await decode_records(self.dlq, msg.raw_message, self.types):
            rec = {**got.value, "stored_at": raw.timestamp / 1000.0}
            # (tracing on: a ``process session.stored`` span, the delivery's parent)
            with bound(session_id=got.model.session_id, turn_id=got.model.turn_id), \
                    tracing.consuming(self.tracer, raw):
                # a record this code can never handle (too large for the store, a shape it
                # cannot use) is dead-lettered and its Turn failed; the store away: retried
                await settle(self.dlq, [(raw, rec)], self._accept, what="dispatcher.accept",
                             dead=self._dead)

    async def _accept(self, recs: list[dict[str, Any]]) -> None:
        for rec in recs:
            async with self.lock:
                await self.binder.accept(rec)

    async def _dead(self, rec: dict[str, Any], poison: Poison) -> None:
        """A dead-lettered input fails its Turn, so its Session does not wait for ever."""
        with contextlib.suppress(Exception):  # best effort: the DLQ record holds the input
            await self.binder.fail_input(rec, f"the input cannot be delivered: {poison.detail}")

    async def on_observation(self, body: Any, msg: KafkaMessage) -> None:
        batch = await decode_records(self.dlq, msg.raw_message, self.types)
        taken = []
        for raw, got in batch:
            # a refusal from a Runtime the Session is not bound to fails nothing: to the DLQ
            why = await self.binder.not_bound(got.value)
            if why is None:
                taken.append((raw, got.value))
            else:
                log.warning("dispatcher.refusal_not_bound", session_id=got.model.session_id,
                            runtime_id=got.model.runtime_id)
                await self.dlq.record(raw, Poison(NOT_BOUND, why))
        await settle(self.dlq, taken, self._observe, what="dispatcher.observe")

    async def _observe(self, recs: list[dict[str, Any]]) -> None:
        for rec in recs:
            await self.binder.observe(rec)

    async def _sweep_loop(self) -> None:
        ttl = max(5.0, self.settings.runtime_heartbeat_timeout_s)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), 1.0)
            self.wake.clear()
            # every replica: heartbeats age without any record arriving
            set_ready_runtimes(self.binder.ready_runtimes())
            try:
                if await self.repo.hold_lease(LEASE, self.instance, time.time(), ttl):
                    async with self.lock:
                        await self.binder.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatcher.sweep_failed")

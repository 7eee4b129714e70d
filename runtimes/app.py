"""The reference Runtime process: Kafka in and out around a harness — the pure
``SimulatedHarness``, or a ``LiveHarness`` driving real harness processes (``--engine real``).
This module wires it up and runs its lifecycle; the parts are:

* ``registration`` — the config and the ``runtime.registration/1`` record, published at start,
  every ``heartbeat_s``, on a switch or status change, and ``status: "gone"`` on a clean stop;
* ``deliveries`` — the delivery loop (own consumer group, at-least-once commits);
* ``outbox`` — the observations out, in the order the harness made them;
* ``control`` — the fold of ``runtime.control``, applied before the first delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer

from runtimes import control, deliveries
from runtimes.live import LiveHarness, stop_engine
from runtimes.outbox import HOLD_S, ObservationOutbox, runtime_producer
from runtimes.registration import (
    STATUSES,
    RuntimeConfig,
    consumer_group,
    heartbeat,
    registration,
    simulated_harness,
)
from runtimes.traces import TRACES
from shared import tracing
from shared.kafka import DeadLetters, encode, ensure_topics, max_record_bytes, producer_send
from shared.logging import get_logger
from shared.sealing import KeyPair
from shared.service import cancel_all
from shared.settings import Settings
from shared.topics import topics_for

log = get_logger(__name__)

__all__ = ["STATUSES", "RuntimeConfig", "RuntimeService", "consumer_group", "registration"]


class RuntimeService:
    def __init__(self, settings: Settings, config: RuntimeConfig,
                 clock: Callable[[], float] = time.monotonic,
                 live: LiveHarness | None = None) -> None:
        self.settings, self.config, self.clock = settings, config, clock
        self.topics = topics_for(settings)
        TRACES.use(tracing.tracer("runtime"))  # None: tracing off (runtimes/traces.py)
        self.harness = simulated_harness(config)
        # The real engine: a live harness replaces the simulation; the Kafka loop is the same.
        self.live = live
        self.status = config.status
        self.incarnation = uuid.uuid4().hex  # this process (``registration``)
        # sealed deliveries: a key pair of this process's own, its public half registered
        self.keys = KeyPair.generate() if config.sealed_deliveries else None
        self.producer = runtime_producer(settings, config.runtime_id)
        # a real harness's records without a fact may wait a moment for the ones behind them
        self.outbox = ObservationOutbox(self.producer, self.topics.runtime_observations,
                                        hold_s=0.0 if live is None else HOLD_S)
        self._tasks: list[asyncio.Task[None]] = []
        self._consumers: list[AIOKafkaConsumer] = []
        self._deliveries: deliveries.DeliveryLoop | None = None
        self.ready = asyncio.Event()
        self.dlq = DeadLetters(producer_send(self.producer, TRACES.tracer), self.topics,
                               max_record_bytes(settings))

    def _task(self, coro: Any, name: str) -> None:
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await self.producer.start()
        self._task(self.outbox.run(), "runtime:publisher")
        if self.live is not None:
            await self.live.start(self.outbox.enqueue)
        ctl = await control.control_consumer(self.settings, self.topics.runtime_control)
        self._consumers.append(ctl)
        await control.catch_up(ctl, self._apply_control)
        self._task(control.follow(ctl, self._apply_control, self.register), "runtime:control")
        # Registered and heartbeating before the deliveries consumer joins its group: that
        # join waits for every member the group knows to rejoin or time out, and after a
        # ``kill -9`` the dead process's member times out only after the group's session
        # timeout (10 s), longer than Core's heartbeat timeout (docs/reference-runtime.md).
        # Registered only after it, a Runtime restarted under its id was taken for gone
        # meanwhile: the Sessions bound to it in that gap failed and were unbound while their
        # deliveries stayed on the topic for the restarted process, whose observations of them
        # were then refused (not the bound Runtime). Deliveries made before the join wait on
        # the topic (read from the group's committed offset), nothing is missed.
        await self.register()
        self._task(heartbeat(self.register, self.config.heartbeat_s), "runtime:heartbeat")
        consumer = deliveries.deliveries_consumer(self.settings, self.topics,
                                                  self.config.runtime_id)
        await consumer.start()
        self._consumers.append(consumer)
        handle = deliveries.to_harness(self.live, self.harness, self.clock, self.outbox.enqueue)
        loop = self._deliveries = deliveries.DeliveryLoop(
            consumer, self.config.runtime_id, handle, self.outbox, self.ready,
            lambda r, poison: self.dlq.record(r, poison), harness=self.config.harness,
            keys=self.keys, incarnation=self.incarnation)
        self._task(loop.run(), "runtime:in")
        if self.live is None:
            self._task(deliveries.idle_ticks(self.harness, self.clock, self.outbox.enqueue),
                       "runtime:idle")
        log.info("runtime.started", runtime_id=self.config.runtime_id,
                 harness=self.config.harness, switches=self.harness.switches.active(),
                 engine="simulated" if self.live is None else "real")

    async def stop(self) -> None:
        self.outbox.cancel_timers()
        await cancel_all([t for t in self._tasks if t.get_name() != "runtime:publisher"])
        await stop_engine(self.live)
        await self.outbox.flush(5)
        if self._deliveries is not None:
            await self._deliveries.commit_read(5)
        with contextlib.suppress(Exception):
            await self.register("gone")
        await cancel_all(self._tasks)
        for c in self._consumers:
            await c.stop()
        await self.producer.stop()
        log.info("runtime.stopped", runtime_id=self.config.runtime_id)

    async def register(self, status: str | None = None) -> None:
        rec = registration(self.config, self.harness, status or self.status, self.live,
                           self.incarnation, self.keys.public if self.keys else None)
        await self.producer.send_and_wait(self.topics.runtime_registrations, encode(rec),
                                          key=self.config.runtime_id.encode())

    async def _apply_control(self, r: Any) -> bool:
        status = await control.apply_control(r, self.config.runtime_id, self.harness,
                                             self.status, self.dlq.record)
        if status is None:
            return False
        self.status = status
        return True


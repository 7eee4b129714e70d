"""receipt-tracker — the entry point: the Kafka consumers and producer, the store client, the
lifecycle. The rules are in ``tracker.py``, the collections in ``repository.py``, how far the
observations are read in ``progress.py`` (docs/receipts.md)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiokafka import AIOKafkaConsumer
from faststream.kafka.annotations import KafkaMessage

from services.receipts import verdicts
from services.receipts.progress import StreamReader, offsets_client, start_offsets
from services.receipts.repository import ReceiptRepository
from services.receipts.tracker import Tracker
from shared import sealing, tracing
from shared.coreservice import CoreService
from shared.domain.poison import UNSEALABLE, Poison
from shared.failures import settle
from shared.kafka import ensure_topics, make_producer
from shared.logging import get_logger
from shared.messages import decode
from shared.sealing import KeyPair
from shared.service import StopSteps, cancel, decode_records, records_of
from shared.settings import Settings
from shared.store import Doc

log = get_logger(__name__)
GROUP = "session-core-receipts"


class ReceiptService(CoreService):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, GROUP, "receipts")
        self.repo = ReceiptRepository(self.db)
        self.tracker = Tracker(self.repo, self.send_facts, settings.receipt_window_s)
        self.tracker.tracer = self.tracer  # None: tracing off
        self.types: decode.TopicTypes = {
            self.topics.runtime_deliveries: decode.DELIVERY,
            self.topics.runtime_observations: decode.OBSERVATION}
        self.tasks: list[asyncio.Task[None]] = []
        # sealed deliveries' content is opened with Core's key (shared/sealing.py)
        self.keys = KeyPair.from_private(settings.seal_key) if settings.seal_key else None
        # The facts go out on a plain producer, as storage's outputs do: at 2 000 timeouts/s
        # FastStream's per-publish wrapper was 2.5 of the tracker's 4 s in its verdict batches
        # (docs/receipts.md, "The deadline path")
        self.producer = make_producer(settings, GROUP)
        common: dict[str, Any] = {"batch": True, "max_records": 500, "batch_timeout_ms": 10}
        # How far each stream is read: deadlines wait for the observations read up to them;
        # an observation kept for a later delivery waits for the deliveries read past it. The
        # end offsets come from a client of their own (``offsets``, started in ``start``): on
        # a consumer's connection they wait behind its idle long-poll fetch (progress.py).
        self.offsets: AIOKafkaConsumer | None = None
        t = self.tracker
        self.reader = StreamReader(self.topics.runtime_observations,
                                   lambda: self.observations.consumer, t.want_read, t.read_to,
                                   lambda: self.offsets)
        self.deliveries_reader = StreamReader(self.topics.runtime_deliveries,
                                              lambda: self.deliveries.consumer,
                                              t.want_deliveries_read, t.deliveries_read_to,
                                              lambda: self.offsets)
        self.deliveries = self.subscriber(self.topics.runtime_deliveries, group=GROUP,
                                          listener=self.deliveries_reader, **common)
        self.deliveries(self.on_deliveries)
        self.observations = self.subscriber(self.topics.runtime_observations,
                                            group=f"{GROUP}-observations",
                                            listener=self.reader, **common)
        self.observations(self.on_observations)

    async def send_facts(self, facts: list[Doc], parents: list[Any] | None = None) -> None:
        await verdicts.send_facts(self.producer, self.topics.core_facts, facts, self.tracer,
                                  parents)

    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        self.offsets = offsets_client(self.settings)
        await start_offsets(self.offsets, (self.topics.runtime_observations,
                                           self.topics.runtime_deliveries))
        await self.repo.ensure_indexes()
        # Every pending deadline is tracked before a consumer runs; the producer is connected
        # first: a reloaded call may take a reloaded kept receipt at once, and publish.
        await self.producer.start()
        await self.tracker.recover()
        await self.broker.start()
        # Calls that fell due while no tracker ran are decided like every other deadline: once
        # the observations consumer has read what was published before them.
        self.tasks = [asyncio.create_task(self.reader.run(), name="receipt-reads"),
                      asyncio.create_task(self.deliveries_reader.run(), name="delivery-reads"),
                      asyncio.create_task(self.tracker.run_timer(), name="receipt-deadlines")]
        log.info("receipts.started", pending=len(self.tracker.calls),
                 kept_early=len(self.tracker.early_order), window_s=self.tracker.window)

    async def stop(self) -> None:
        steps = StopSteps()
        for task in self.tasks:
            await steps.run(f"task {task.get_name()}", cancel(task))
        await steps.run("drain", self.tracker.drain())
        await steps.run("subscribers", self.broker.stop())
        await steps.run("drain again", self.tracker.drain())
        await steps.run("producer", self.producer.stop())
        if self.offsets is not None:
            await steps.run("offsets", self.offsets.stop())
            self.offsets = None
        await steps.run("store", self.client.close())
        steps.log()

    # A batch that fails for good (a record too large for the store, one the tracker cannot
    # use) is taken record by record and the failing ones dead-lettered; the store away: the
    # batch is retried, then read again (shared/failures.py).
    async def on_deliveries(self, body: Any, msg: KafkaMessage) -> None:
        batch = []
        for raw, got in await decode_records(self.dlq, msg.raw_message, self.types):
            if got.value.get("kind") != "function_result":
                continue
            rec = await self.opened(raw, got.value)
            if rec is not None:
                batch.append((raw, (rec, raw.timestamp / 1000.0)))
        if self.tracer is not None:  # a deadline's verdict goes on in its delivery's trace
            for raw, (rec, _) in batch:
                ctx = tracing.context_of(raw.headers)
                if ctx is not None:
                    self.tracker.traces[(rec["session_id"], rec["call_id"])] = ctx
        await settle(self.dlq, batch, self.tracker.open_calls, what="receipts.open_calls")
        self.deliveries_reader.handled(records_of(msg.raw_message))

    async def opened(self, raw: Any, rec: Doc) -> Doc | None:
        """The delivered result as the tracker matches it: a sealed one opened with Core's key
        (its content is what the receipt is compared with); one that does not open goes to
        the DLQ, and its call gets no window here (the Runtime refuses it too)."""
        if not sealing.is_sealed(rec):
            return rec
        try:
            if self.keys is None:
                raise sealing.SealError("sealed, and the tracker has no SESSION_CORE_SEAL_KEY")
            return sealing.unseal(rec, self.keys)
        except sealing.SealError as exc:
            await self.dlq.record(raw, Poison(UNSEALABLE, str(exc)[:300]))
            return None

    async def on_observations(self, body: Any, msg: KafkaMessage) -> None:
        batch = await decode_records(self.dlq, msg.raw_message, self.types)
        if self.tracer is not None:  # a receipt's verdict goes on in its observation's trace
            self.tracker.obs_contexts = {id(got.value): ctx for raw, got in batch
                                         if (ctx := tracing.context_of(raw.headers))}
        try:
            await settle(self.dlq,
                         [(raw, (got.value, raw.timestamp / 1000.0)) for raw, got in batch],
                         self.tracker.observe_batch, what="receipts.observe_batch")
        finally:
            self.tracker.obs_contexts = {}
        recs = records_of(msg.raw_message)
        if recs and log.is_enabled_for(logging.DEBUG):
            log.debug("receipts.observations_handled", first=[recs[0].partition, recs[0].offset],
                      last=[recs[-1].partition, recs[-1].offset], n=len(recs))
        self.reader.handled(recs)

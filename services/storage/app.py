"""storage — persists admitted input exactly as sent, assigns Item sequences, publishes Items.

Consumes ``session.admitted``, ``core.facts`` and ``runtime.observations`` in one consumer group
with the range assignor: the three topics are keyed by ``session_id`` with the same partition
count, so one storage replica owns all records of a Session (one writer per Session). A batch's
offsets are committed once it is durable in the store and its Items are acknowledged — from a
task of their own, while the next batch is written (``OffsetCommits``); an exception rewinds the
batch to its first record of each partition."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from faststream import AckPolicy
from faststream.kafka.annotations import KafkaMessage
from opentelemetry.context import Context

from services.storage.batch import RETRY_ERRORS, BatchWriter, Handovers, Rebalance, positions
from services.storage.decided import DecidedState
from services.storage.handler import RECORD_TYPES, StorageHandler
from services.storage.offsets import OffsetCommits
from services.storage.repository import StorageRepository
from shared import records
from shared.coreservice import CoreService
from shared.failures import Backoff, classify
from shared.kafka import (
    HANDOVER_LINGER_MS,
    ensure_topics,
    make_producer,
    max_record_bytes,
    now_rfc3339,
    send_counted,
)
from shared.logging import get_logger
from shared.service import StopSteps, records_of
from shared.settings import Settings
from shared.store import ensure_indexes

log = get_logger(__name__)
GROUP = "session-core-storage"
STOP_COMMIT_S = 5.0  # a clean stop waits this long at most for its last offset commit


class StorageService(CoreService):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, GROUP, "storage")
        self.repo = StorageRepository(
            self.db,
            settings.inline_image_max_bytes,
            settings.image_chunk_bytes,
        )
        # what this replica may take from memory, and which records another writer may have
        # decided (services/storage/decided.py)
        self.decided = DecidedState(settings.storage_batch_max)
        self.handler = StorageHandler(self.repo, now_rfc3339, self.decided)
        self.handler.traced = self.tracer is not None  # each output's origin (tracing)
        self.types = {
            self.topics.session_admitted: RECORD_TYPES[records.ADMITTED],
            self.topics.core_facts: RECORD_TYPES[records.FACT],
            self.topics.runtime_observations: RECORD_TYPES[records.OBSERVATION],
        }
        # Items, stored inputs and answers go out on a plain producer: three records per input
        # on the hot path, where FastStream's publish wrapper cost several times aiokafka's
        # own ``send`` (docs/decisions.md, "Storage publishes on a plain aiokafka producer")
        self.producer = make_producer(settings, GROUP, linger_ms=HANDOVER_LINGER_MS)
        self.handovers = Handovers(
            self.repo, self.decided,
            f"{self.topics.group(GROUP)}/{settings.topic_partitions}", uuid4().hex)
        self.batches = BatchWriter(self.repo, self.handler, self.decided, self.dlq, self.topics,
                                   self.types, self._send, self.handovers, self.tracer)
        self.batch_lock = asyncio.Lock()  # held while a batch is decided and written
        self.consumer: Any = None  # the subscriber's AIOKafkaConsumer (seen with a batch)
        self.commits = OffsetCommits(lambda: self.consumer)
        self.stopping = False
        self.backoff = Backoff()
        self.subscriber(
            self.topics.session_admitted,
            self.topics.core_facts,
            self.topics.runtime_observations,
            group=GROUP,
            batch=True,
            max_records=settings.storage_batch_max,
            batch_timeout_ms=20,
            partition_assignment_strategy=(RangePartitionAssignor,),
            fetch_max_bytes=max_record_bytes(settings) * 2,
            ack_policy=AckPolicy.MANUAL,  # on_batch commits (behind) and rewinds itself
            listener=Rebalance(self.batch_lock, self.decided, lambda: self.consumer,
                               self.repo.session_writer, self.handovers, self.commits),
        )(self.on_batch)

    async def on_batch(self, body: Any, msg: KafkaMessage) -> None:
        async with self.batch_lock:
            self.consumer = msg.consumer  # the AIOKafkaConsumer that fetched the batch
            raws = records_of(msg.raw_message)
            try:
                await self.batches.take(raws, self.consumer)
            except BaseException as exc:
                await msg.nack()  # each partition rewound to the batch's first record
                if isinstance(exc, Exception) and classify(exc, RETRY_ERRORS) == "transient":
                    # the store or broker away: the batch is read again after a pause that
                    # grows to 5 s, not at once (records that can never succeed were
                    # dead-lettered by the batch writer: BatchWriter.write)
                    await self.backoff.pause()
                raise
            self.backoff.reset()
            self.commits.behind(self.decided.written(positions(raws)))
            if self.stopping:  # the last batch: committed before the consumer closes
                await self.commits.flush(STOP_COMMIT_S)

    async def _send(self, topic: str, value: bytes, key: bytes, parent: Context | None = None
                    ) -> Any:
        return await send_counted(self.producer, topic, value, key, self.tracer, parent)

    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await ensure_indexes(self.repo.db)
        await self.repo.mark_genesis()
        self.repo.session_writer.start()
        await self.producer.start()
        await self.broker.start()
        log.info("storage.started", group=GROUP)

    async def stop(self) -> None:
        self.stopping = True
        steps = StopSteps()

        async def flush() -> None:
            async with self.batch_lock:
                await self.commits.flush(STOP_COMMIT_S)

        await steps.run("commits", flush())
        await steps.run("subscribers", self.broker.stop())  # the batch being written finishes
        await steps.run("producer", self.producer.stop())
        # what is behind, written (at most 5 s)
        await steps.run("session writer", self.repo.session_writer.stop())
        if self.repo.session_writer.dirty:  # not all written: the shards stay held (probed)
            self.decided.writes_dropped()
        # leaving the group revoked nothing (aiokafka calls no listener on stop)
        await steps.run("handovers", self.handovers.release(set(self.decided.held)))
        await steps.run("store", self.client.close())
        steps.log()

"""storage — persists admitted input exactly as sent, assigns Item sequences, publishes Items.

Consumes ``session.admitted``, ``core.facts`` and ``runtime.observations`` in one consumer group
with the range assignor: the three topics are keyed by ``session_id`` with the same partition
count, so one storage replica owns all records of a Session (one writer per Session). Offsets are
committed after the batch is durable in the store and its Items are published (AckPolicy.ACK
after the handler returns; an exception rewinds the batch — NACK_ON_ERROR)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from aiokafka import ConsumerRebalanceListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pymongo.errors import AutoReconnect, ConnectionFailure, ServerSelectionTimeoutError

from services.storage.handler import Outputs, StorageHandler, load_reply_items, record_to_inputs
from services.storage.repository import StorageRepository
from shared import records
from shared.domain.recordcheck import UNPROCESSABLE, Poison
from shared.kafka import (
    DeadLetters,
    broker_send,
    encode,
    ensure_topics,
    make_broker,
    max_record_bytes,
    now_rfc3339,
)
from shared.logging import get_logger
from shared.service import decode_batch, raw_decoder
from shared.settings import Settings
from shared.store import database, ensure_indexes, make_client, ping
from shared.topics import Topics, topics_for

log = get_logger(__name__)
GROUP = "session-core-storage"
INFRA_ERRORS = (ConnectionFailure, AutoReconnect, ServerSelectionTimeoutError, OSError)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Partitions moved: what this replica remembers of its Sessions may be stale."""

    def __init__(self, handler: StorageHandler) -> None:
        self.handler = handler

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.handler.invalidate()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.handler.invalidate()


class StorageService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics: Topics = topics_for(settings)
        self.broker: KafkaBroker = make_broker(settings, "session-core-storage")
        self.client = make_client(settings)
        self.repo = StorageRepository(
            database(self.client, settings),
            settings.inline_image_max_bytes,
            settings.image_chunk_bytes,
        )
        self.handler = StorageHandler(self.repo, now_rfc3339)
        self.dlq = DeadLetters(broker_send(self.broker), self.topics)
        self.schemas = {
            self.topics.session_admitted: frozenset({records.ADMITTED}),
            self.topics.core_facts: frozenset({records.FACT}),
            self.topics.runtime_observations: frozenset({records.OBSERVATION}),
        }
        self.broker.subscriber(
            self.topics.session_admitted,
            self.topics.core_facts,
            self.topics.runtime_observations,
            group_id=self.topics.group(GROUP),
            batch=True,
            max_records=settings.storage_batch_max,
            batch_timeout_ms=20,
            auto_offset_reset="earliest",
            partition_assignment_strategy=(RangePartitionAssignor,),
            max_partition_fetch_bytes=max_record_bytes(settings),
            fetch_max_bytes=max_record_bytes(settings) * 2,
            ack_policy=AckPolicy.NACK_ON_ERROR,
            decoder=raw_decoder,
            listener=_Rebalance(self.handler),
        )(self.on_batch)

    async def on_batch(self, body: Any, msg: KafkaMessage) -> None:
        try:
            await self._on_batch(msg)
        except BaseException:
            self.handler.invalidate()  # the batch will be redelivered: trust only the store
            raise

    async def _on_batch(self, msg: KafkaMessage) -> None:
        decoded = await decode_batch(self.dlq, msg.raw_message, self.schemas)
        inputs = []
        source: dict[int, Any] = {}  # id(input) → the record it came from
        for raw, rec in decoded:
            try:
                found = record_to_inputs(rec)
                for inp in found:
                    if not isinstance(inp.get("session_id"), str):
                        raise ValueError("record has no session_id")
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                await self.dlq.record(raw, Poison(UNPROCESSABLE, repr(exc)[:300]))
                continue
            for inp in found:
                source[id(inp)] = raw
            inputs.extend(found)
        try:
            out = await self.handler.handle(inputs)
        except INFRA_ERRORS:
            raise  # the store or broker is away: rewind the batch and retry it
        except Exception:
            self.handler.invalidate()
            # A record this code cannot process must not stall its partition forever:
            # process one by one and dead-letter the ones that fail.
            log.exception("storage.batch_failed_isolating")
            out = Outputs()
            for inp in inputs:
                try:
                    one = await self.handler.handle([inp])
                except INFRA_ERRORS:
                    raise
                except Exception as exc:
                    self.handler.invalidate()
                    await self.dlq.record(source[id(inp)], Poison(
                        UNPROCESSABLE, f"processing failed: {exc!r}"[:300]))
                    continue
                out.items += one.items
                out.stored += one.stored
                out.replies += one.replies
        # Durable now: publish Items (by id, in sequence order) and inputs to deliver, then the
        # answers. Each wave is sent without awaiting every record (the idempotent producer keeps
        # the send order per partition, so per Session), then awaited as a whole before the next
        # wave and before the offsets are committed.
        wave = [self._send(self.topics.session_items, {"schema": records.ITEM, **item},
                           item["session_id"]) for item in out.items]
        wave += [self._send(self.topics.session_stored, {"schema": records.STORED, **stored},
                            stored["session_id"]) for stored in out.stored]
        await asyncio.gather(*[await f for f in wave])
        answers = []
        for reply in out.replies:
            reply = await load_reply_items(self.repo, reply)
            answers.append(await self._send(self.topics.storage_replies,
                                            {"schema": records.STORAGE_REPLY, **reply},
                                            reply["request_id"]))
        await asyncio.gather(*answers)
        if inputs:
            log.debug("storage.batch", records=len(inputs), items=len(out.items))

    async def _send(self, topic: str, record: dict[str, Any], key: str
                    ) -> Awaitable[Any]:
        """Hand one record to the producer; the returned future resolves when it is acked."""
        fut: Awaitable[Any] = await self.broker.publish(
            encode(record), topic=topic, key=key.encode(),
            headers={"content-type": "application/json"}, no_confirm=True,
        )
        return fut

    async def ready(self) -> bool:
        return await ping(self.client) and await self.broker.ping(timeout=2.0)

    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await ensure_indexes(self.repo.db)
        await self.broker.start()
        log.info("storage.started", group=GROUP)

    async def stop(self) -> None:
        await self.broker.stop()
        await self.client.close()

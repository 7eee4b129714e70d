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

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pymongo.errors import AutoReconnect, ConnectionFailure, ServerSelectionTimeoutError

from services.storage.decided import DecidedState
from services.storage.handler import (
    RECORD_TYPES,
    Outputs,
    StorageHandler,
    inputs_of,
    load_reply_items,
    source_key,
)
from services.storage.repository import StaleDecision, StorageRepository
from shared import records
from shared.domain.poison import UNPROCESSABLE, Poison
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
from shared.metrics import STORAGE_BATCH_RECORDS, STORAGE_BATCH_SECONDS, Stopwatch
from shared.records import item_record
from shared.service import decode_records, raw_decoder
from shared.settings import Settings
from shared.store import database, ensure_indexes, make_client, ping
from shared.topics import Topics, topics_for

log = get_logger(__name__)
GROUP = "session-core-storage"
# The batch is rewound and decided again from the store: the store or broker is away, or a
# decision met the store holding another one at its place (stale state; nothing published).
RETRY_ERRORS = (ConnectionFailure, AutoReconnect, ServerSelectionTimeoutError, OSError,
                StaleDecision)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Partitions move. One writer per Session holds only if a replica finishes the batch it is
    writing BEFORE it gives its partitions up: aiokafka awaits ``on_partitions_revoked`` before
    this member rejoins, and no member is assigned anything before every member has revoked, so
    waiting here for the batch lock fences the old owner off. (Otherwise a replica could go on
    writing a batch while the new owner decides the same Sessions from the store: two Items at
    one sequence, an admitted message missing from the store.) What this replica remembers of
    its Sessions may be stale afterwards (``DecidedState``)."""

    def __init__(self, service: StorageService) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: Any) -> None:
        svc = self.service
        async with svc.batch_lock:
            # Hand over exactly what was written: commit the written offsets of the revoked
            # partitions (the framework's commit after the batch may come too late, mid-
            # rebalance), so the new owner starts after them instead of re-deciding them.
            done = svc.decided.revoked(revoked)
            if done and svc.consumer is not None:
                try:
                    await svc.consumer.commit(done)
                except Exception as exc:  # the new owner replays them from the journal
                    log.warning("storage.revoke_commit_failed", error=repr(exc))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.service.decided.assigned(assigned)


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
        # what this replica may take from memory, and which records another writer may have
        # decided (services/storage/decided.py)
        self.decided = DecidedState(settings.storage_batch_max)
        self.handler = StorageHandler(self.repo, now_rfc3339, self.decided)
        self.dlq = DeadLetters(broker_send(self.broker), self.topics)
        self.types = {
            self.topics.session_admitted: RECORD_TYPES[records.ADMITTED],
            self.topics.core_facts: RECORD_TYPES[records.FACT],
            self.topics.runtime_observations: RECORD_TYPES[records.OBSERVATION],
        }
        self.batch_lock = asyncio.Lock()  # held while a batch is decided and written
        self.consumer: Any = None  # the subscriber's AIOKafkaConsumer (seen with a batch)
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
            listener=_Rebalance(self),
        )(self.on_batch)

    async def on_batch(self, body: Any, msg: KafkaMessage) -> None:
        async with self.batch_lock:
            # A batch fetched before a rebalance may hold records of partitions this replica
            # no longer owns (their new owner reads them from the committed offset): skip them.
            raws = msg.raw_message if isinstance(msg.raw_message, tuple) else (msg.raw_message,)
            self.consumer = msg.consumer  # the AIOKafkaConsumer that fetched the batch
            owned = self.consumer.assignment()
            mine = tuple(r for r in raws if TopicPartition(r.topic, r.partition) in owned)
            if len(mine) < len(raws):
                log.warning("storage.skipped_revoked", records=len(raws) - len(mine))
            if not mine:
                return
            STORAGE_BATCH_RECORDS.observe(len(mine))
            try:
                with Stopwatch(STORAGE_BATCH_SECONDS):
                    await self._on_batch(mine)
            except BaseException:  # the batch will be redelivered, perhaps decided in part
                self.decided.batch_failed(_positions(mine))
                raise
            self.decided.batch_done(_positions(mine))

    async def _on_batch(self, raws: tuple[Any, ...]) -> None:
        # records another writer may have decided (in partition order: the first record of a
        # just-assigned partition opens its window)
        suspects = {(tp, off) for tp, off in _positions(raws) if self.decided.arrived(tp, off)}
        decoded = await decode_records(self.dlq, raws, self.types)
        inputs = []
        held: list[tuple[tuple[Any, int], list[Any]]] = []  # each record's position, inputs
        source: dict[int, Any] = {}  # id(input) → the record it came from
        for raw, rec in decoded:
            try:
                found = inputs_of(rec)
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                await self.dlq.record(raw, Poison(UNPROCESSABLE, repr(exc)[:300]))
                continue
            for inp in found:
                source[id(inp)] = raw
            inputs.extend(found)
            held.append(((TopicPartition(raw.topic, raw.partition), raw.offset), found))
        await self._probe(held)
        verify = {source_key(inp) for pos, found in held
                  if pos in suspects and self.decided.in_window(*pos) for inp in found}
        try:
            out = await self.handler.handle(inputs, frozenset(verify), defer_rest=True)
        except StaleDecision as exc:
            log.warning("storage.stale_decision", error=str(exc))
            raise
        except RETRY_ERRORS:
            raise  # the store or broker is away: rewind the batch and retry it
        except Exception:
            self.decided.forget()
            # A record this code cannot process must not stall its partition forever:
            # process one by one and dead-letter the ones that fail.
            log.exception("storage.batch_failed_isolating")
            out = Outputs()
            # the failed attempt may have journaled some: every one is checked, not only the
            # first (the first good one makes the handler trusted again)
            everything = frozenset(source_key(i) for i in inputs)
            for inp in inputs:
                try:
                    one = await self.handler.handle([inp], everything)
                except RETRY_ERRORS:
                    raise
                except Exception as exc:
                    self.decided.forget()
                    await self.dlq.record(source[id(inp)], Poison(
                        UNPROCESSABLE, f"processing failed: {exc!r}"[:300]))
                    await self.repo.skipped({source_key(inp): inp["session_id"]})
                    continue
                out.merge(one)
        # Durable now (Items and journal): hand the Items (by id, in sequence order) and the
        # inputs to deliver to the producer without awaiting each (the idempotent producer keeps
        # the send order per partition, so per Session); meanwhile write what derives from the
        # journal (calls, verdicts, idempotency, Sessions), which a retry's answer and the next
        # batch read; then the answers; then await every ack before the offsets are committed.
        sent = [await self._send(self.topics.session_items,
                                 item_record(item, out.tenants[item["session_id"]]),
                                 item["session_id"]) for item in out.items]
        sent += [await self._send(self.topics.session_stored, records.stored_record(stored),
                                  stored["session_id"]) for stored in out.stored]
        await self.repo.apply_rest(out.rest)
        for reply in out.replies:
            reply = await load_reply_items(self.repo, reply)
            sent.append(await self._send(self.topics.storage_replies,
                                         {"schema": records.STORAGE_REPLY, **reply},
                                         reply["request_id"]))
        await asyncio.gather(*sent)
        if inputs:
            log.debug("storage.batch", records=len(inputs), items=len(out.items))

    async def _probe(self, held: list[tuple[tuple[Any, int], list[Any]]]) -> None:
        """Look up the first record (standing for any input) of each just-assigned partition:
        if the journal does not hold it, it holds nothing after it (``DecidedState.probed``)."""
        firsts: dict[Any, str] = {}
        for (tp, _), found in held:
            if found and tp in self.decided.unprobed and tp not in firsts:
                firsts[tp] = source_key(found[0])
        if firsts:
            journaled = await self.repo.journaled(firsts.values())
            for tp, key in firsts.items():
                self.decided.probed(tp, key in journaled)

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


def _positions(raws: tuple[Any, ...]) -> list[tuple[TopicPartition, int]]:
    return [(TopicPartition(r.topic, r.partition), r.offset) for r in raws]

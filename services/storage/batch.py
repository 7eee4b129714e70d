"""One storage batch, from the records fetched to the answers sent: decode, find which records
another writer may have decided (``DecidedState``; one journal probe per assigned partition) and
whose Session documents are current (the shards' handover marks, ``Handovers``), decide and write
them (``StorageHandler``), then publish the Items and the inputs to deliver, finish the derived
writes meanwhile, and answer admission. Also the rebalance listener that fences a replica off its
Sessions when its partitions move."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from opentelemetry.context import Context
from opentelemetry.trace import Span, Tracer
from pymongo.errors import AutoReconnect, ConnectionFailure, ServerSelectionTimeoutError

from services.storage.decided import DecidedState, Shard, shard
from services.storage.handler import (
    NotBoundYet,
    Outputs,
    StorageHandler,
    inputs_of,
    load_reply_items,
    source_key,
)
from services.storage.offsets import OffsetCommits
from services.storage.publishorder import PublishOrder
from services.storage.repository import StaleDecision, StorageRepository
from services.storage.sessionwriter import SessionWriter
from shared import records, tracing
from shared.domain.poison import NOT_BOUND, UNPROCESSABLE, Poison
from shared.failures import poison_of
from shared.kafka import DeadLetters, encode
from shared.logging import get_logger
from shared.messages import decode
from shared.metrics import STORAGE_BATCH_RECORDS, STORAGE_BATCH_SECONDS, Stopwatch
from shared.records import item_record
from shared.service import decode_records
from shared.topics import Topics

log = get_logger(__name__)
# The batch is rewound and decided again from the store: the store or broker is away, or a
# decision met the store holding another one at its place (stale state; nothing published).
RETRY_ERRORS = (ConnectionFailure, AutoReconnect, ServerSelectionTimeoutError, OSError,
                StaleDecision)
# (topic, value, key[, parent]) → a future resolved when the broker acked the record; ``parent``
# (tracing on): the trace context the record goes on in
Send = Callable[..., Awaitable[Awaitable[Any]]]
REVOKE_DRAIN_S = 10.0  # Session documents written before partitions are given up, at most
TARGETS_MAX = 10_000  # observations held back whose core.facts target is remembered
REVOKE_COMMIT_S = 5.0  # the offset commit in flight awaited before partitions are given up


@dataclass(frozen=True)
class Handovers:
    """This replica's side of the shards' handover marks (``DecidedState``, "current")."""

    repo: StorageRepository
    decided: DecidedState
    prefix: str  # the consumer group and the partition count: Sessions move with either
    holder: str  # this replica, for as long as it runs

    def key(self, shard_: Shard) -> str:
        return f"{self.prefix}/{shard_}"

    async def take(self, partitions: set[Any]) -> None:
        """Before a batch writes anything of a shard this replica has not marked yet."""
        shards = self.decided.marks_to_take(partitions)
        if shards:
            clean = await self.repo.take_marks({s: self.key(s) for s in shards}, self.holder)
            for s in shards:
                self.decided.marked(s, s in clean)

    async def release(self, shards: set[Shard]) -> None:
        """Shards given up (call after the Session writer drained, or failed): those
        ``DecidedState`` still deems current are marked ``clean``."""
        clean = self.decided.release(shards)
        if clean:
            try:
                await self.repo.release_marks([self.key(s) for s in clean], self.holder)
            except Exception as exc:  # they stay held: the next owner probes
                log.warning("storage.release_marks_failed", error=repr(exc)[:300])


class Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    """Partitions move. One writer per Session holds only if a replica finishes the batch it is
    writing BEFORE it gives its partitions up: aiokafka awaits ``on_partitions_revoked`` before
    this member rejoins, and no member is assigned anything before every member has revoked, so
    waiting here for the batch lock fences the old owner off. (Otherwise a replica could go on
    writing a batch while the new owner decides the same Sessions from the store: two Items at
    one sequence, an admitted message missing from the store.) What this replica remembers of
    its Sessions may be stale afterwards (``DecidedState``)."""

    def __init__(self, lock: asyncio.Lock, decided: DecidedState,
                 consumer: Callable[[], Any], writer: SessionWriter,
                 handovers: Handovers, commits: OffsetCommits) -> None:
        self.lock = lock
        self.decided = decided
        self.consumer = consumer
        self.writer = writer
        self.handovers = handovers
        self.commits = commits

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self.lock:
            # the new owner reads the Session documents: write what is behind first (the
            # store away: the new owner rolls those Sessions forward from the journal)
            try:
                await self.writer.drain(REVOKE_DRAIN_S)
            except Exception as exc:
                log.warning("storage.revoke_drain_failed", error=repr(exc))
                self.writer.drop()
                self.decided.writes_dropped()
            # the shards go over clean (or, after a failure, stay marked held: probed)
            await self.handovers.release({shard(tp) for tp in revoked})
            # Hand over exactly what was written: commit the written offsets of the revoked
            # partitions (the commit behind the last batch may come too late, mid-rebalance),
            # so the new owner starts after them instead of re-deciding them — after the
            # commit in flight, so that its older offsets cannot land after these.
            self.commits.drop(revoked)
            await self.commits.flush(REVOKE_COMMIT_S)
            done = self.decided.revoked(revoked)
            consumer = self.consumer()
            if done and consumer is not None:
                try:
                    await consumer.commit(done)
                except Exception as exc:  # the new owner replays them from the journal
                    log.warning("storage.revoke_commit_failed", error=repr(exc))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.decided.assigned(assigned)


@dataclass(eq=False)
class BatchWriter:
    """Takes one fetched batch (``take``) and writes what this replica still owns of it
    (``write``); the app holds the batch lock around it."""

    repo: StorageRepository
    handler: StorageHandler
    decided: DecidedState
    dlq: DeadLetters
    topics: Topics
    types: dict[str, decode.RecordType[Any]]
    send: Send
    handovers: Handovers
    tracer: Tracer | None = None  # on: a ``process <topic>`` span per record (``_trace``)
    # the batch's records' spans while it is written, and each input's (by source key) context
    spans: list[Span] = field(default_factory=list)
    parents: dict[str, Context] = field(default_factory=dict)
    # an observation held back (topic, partition, offset) → the end of its partition of
    # core.facts when it was first held: read to there, it is refused (``_facts_behind``)
    targets: dict[tuple[str, int, int], int] = field(default_factory=dict)
    order: PublishOrder | None = None  # first publications in sequence order (set in __post_init__)

    def __post_init__(self) -> None:
        if self.order is None:
            self.order = PublishOrder(self.repo)

    async def take(self, raws: tuple[Any, ...], consumer: Any) -> None:
        """The records of ``raws`` whose partitions ``consumer`` (the AIOKafkaConsumer that
        fetched them) still owns, written; what ``DecidedState`` knows of them, told."""
        # A batch fetched before a rebalance may hold records of partitions this replica
        # no longer owns (their new owner reads them from the committed offset): skip them.
        owned = consumer.assignment()
        mine = tuple(r for r in raws if TopicPartition(r.topic, r.partition) in owned)
        if len(mine) < len(raws):
            log.warning("storage.skipped_revoked", records=len(raws) - len(mine))
        if not mine:
            return
        STORAGE_BATCH_RECORDS.observe(len(mine))
        self.repo.session_writer.took_batch(len(mine))  # behind its input: writes held back
        try:
            with Stopwatch(STORAGE_BATCH_SECONDS):
                held = await self.write(mine, consumer)
        except BaseException as exc:  # the batch will be redelivered, perhaps decided in part
            self.decided.batch_failed(positions(mine))
            self._end_spans(exc)
            raise
        # records held back (``_handle``) are read again: their offsets are not committed
        self.decided.batch_done([(tp, off) for tp, off in positions(mine)
                                 if not (tp in held and off >= held[tp])])
        self._end_spans(None)

    async def write(self, raws: tuple[Any, ...], consumer: Any = None
                    ) -> dict[TopicPartition, int]:
        """Decide and write ``raws``; what was held back to be read again (partition → the
        first offset held: ``_handle``)."""
        # in partition order: the first record of a just-assigned partition opens its window
        for tp, off in positions(raws):
            self.decided.arrived(tp, off)
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
        sessions = {inp["session_id"]: tp for (tp, _), found in held for inp in found}
        if self.tracer is not None:
            self._trace(self.tracer, inputs, source, len(raws))
        self.decided.batch_begins({sid: shard(tp) for sid, tp in sessions.items()})
        await self._probe(held)
        await self.handovers.take({tp for (tp, _), _found in held})
        # records another writer may have decided (the probe may have closed windows)
        verify = {source_key(inp) for pos, found in held if self.decided.in_window(*pos)
                  for inp in found}
        current = frozenset(sid for sid, tp in sessions.items()
                            if self.decided.trusts_document(sid, tp))
        by_key = {source_key(inp): source[id(inp)] for inp in inputs}
        where = {k: [r.topic, r.partition, r.offset] for k, r in by_key.items()}
        back: dict[TopicPartition, int] = {}
        try:
            out = await self._handle(inputs, by_key, consumer, back, verify=frozenset(verify),
                                     defer_rest=True, current=current, positions=where)
        except StaleDecision as exc:
            log.warning("storage.stale_decision", error=str(exc))
            raise
        except RETRY_ERRORS:
            raise  # the store or broker is away: rewind the batch and retry it
        except Exception:
            self.decided.attempt_failed()
            # A record this code cannot process must not stall its partition forever:
            # process one by one and dead-letter the ones that fail.
            log.exception("storage.batch_failed_isolating")
            out = Outputs()
            # the failed attempt may have journaled some: every one is checked, not only the
            # first (the first good one makes the handler trusted again)
            everything = frozenset(source_key(i) for i in inputs)
            for inp in inputs:
                try:
                    one = await self._handle([inp], by_key, consumer, back,
                                             verify=everything, positions=where)
                except RETRY_ERRORS:
                    raise
                except Exception as exc:
                    self.decided.attempt_failed()
                    # too_large (DocumentTooLarge) or unprocessable (shared/failures.py)
                    await self.dlq.record(source[id(inp)], poison_of(exc))
                    await self.repo.skipped({source_key(inp): inp["session_id"]})
                    continue
                out.merge(one)
        # Durable now (Items and journal): hand the Items (by id, in sequence order) and the
        # inputs to deliver to the producer without awaiting each (the idempotent producer keeps
        # the send order per partition, so per Session) — a task of its own, so that this
        # CPU work overlaps the store's work on what derives from the journal (calls,
        # idempotency, Sessions), which a retry's answer and the next batch read; then the
        # answers; then await every ack before the offsets are committed.
        assert self.order is not None
        ordered = frozenset(sid for sid, tp in sessions.items()
                            if self.decided.publishes_in_order(sid, tp))
        out.items = await self.order.complete(out.items, ordered, _committed(consumer))
        handing = asyncio.create_task(self._hand_over(out), name="storage-hand-over")
        try:
            await self.repo.apply_rest(out.rest, defer=True)
        except BaseException:
            handing.cancel()  # the batch is retried from the start: its Items go again
            raise
        sent = await handing
        dead = set()
        for key, why in out.refused.items():  # one DLQ record per observation refused
            raw = by_key[key]
            if id(raw) not in dead:
                dead.add(id(raw))
                await self.dlq.record(raw, Poison(NOT_BOUND, why))
        for reply in out.replies:
            parent = self._parent(out, reply, reply.get("request_id"))
            reply = await load_reply_items(self.repo, reply)
            sent.append(await self._send(self.topics.storage_replies,
                                         {"schema": records.STORAGE_REPLY, **reply},
                                         reply["request_id"], parent))
        await asyncio.gather(*sent)
        self.order.saw_acked(out.items)
        if self.decided.unacked:  # only after a failed batch
            heads: dict[str, int] = {}
            for it in out.items:
                sid = it["session_id"]
                heads[sid] = max(heads.get(sid, 0), int(it["sequence"]))
            self.decided.acked(heads)
        if inputs:
            log.debug("storage.batch", records=len(inputs), items=len(out.items))
        return back

    async def _handle(self, inputs: list[Any], by_key: dict[str, Any], consumer: Any,
                      held: dict[TopicPartition, int], **kw: Any) -> Outputs:
        """``handler.handle``, with observations of a Runtime their Session is not bound to
        (``NotBoundYet``) settled per partition: where ``core.facts`` is read to its end (the
        binding published before the delivery they answer would have been read), they are
        refused; elsewhere they and the records after them on their partition are held back —
        left out of this batch and read again (``consumer.seek``; ``held`` names them) — while
        the rest of the batch, the facts that may bind them included, is decided."""
        try:
            return await self.handler.handle(inputs, **kw)
        except NotBoundYet as exc:
            raws = {k: by_key[k] for k in exc.keys}
            behind = await self._facts_behind(list(raws.values()), consumer)
            refuse = frozenset(k for k, r in raws.items() if id(r) not in behind)
            for r in raws.values():
                if id(r) in behind:
                    tp = TopicPartition(r.topic, r.partition)
                    held[tp] = min(held.get(tp, r.offset), r.offset)
            if held:
                log.info("storage.bindings_behind", sessions=sorted(exc.session_ids)[:5],
                         held={f"{tp.topic}/{tp.partition}": o for tp, o in held.items()})
                for tp, offset in held.items():
                    consumer.seek(tp, offset)

            def kept(inp: Any) -> bool:
                r = by_key[source_key(inp)]
                tp = TopicPartition(r.topic, r.partition)
                return not (tp in held and r.offset >= held[tp])

            return await self.handler.handle([i for i in inputs if kept(i)], refuse=refuse,
                                             **kw)

    async def _facts_behind(self, raws: list[Any], consumer: Any) -> set[int]:
        """The observations of ``raws`` (by ``id``) whose binding may still be unread:
        ``consumer`` has not yet read their partition of ``core.facts`` (the same index holds
        their Sessions' facts) up to its end as the broker gave it when the observation was
        first held — everything appended before the observation was read, the binding its
        Runtime answers included. (A fixed target, not the end now: under a steady stream of
        facts the end now may stay ahead, and a forged observation would hold its partition.)"""
        if consumer is None:
            return set()  # records handed in directly: nothing else to read
        if len(self.targets) > TARGETS_MAX:
            self.targets.clear()  # (a fresh target only holds longer, never refuses earlier)
        keys = {id(r): (r.topic, r.partition, r.offset) for r in raws}
        facts = {id(r): TopicPartition(self.topics.core_facts, r.partition) for r in raws}
        new = sorted({facts[i] for i, k in keys.items() if k not in self.targets})
        if new:
            ends = await consumer.end_offsets(new)
            for i, k in keys.items():
                self.targets.setdefault(k, ends.get(facts[i], 0))
        behind = set()
        for i, k in keys.items():
            if await consumer.position(facts[i]) < self.targets[k]:
                behind.add(i)
            else:
                del self.targets[k]  # decided now: refused
        return behind

    async def _hand_over(self, out: Outputs) -> list[Awaitable[Any]]:
        """The batch's Items and stored inputs handed to the producer, in order; their acks."""
        sent = [await self._send(self.topics.session_items,
                                 item_record(item, out.tenants[item["session_id"]]),
                                 item["session_id"], self._parent(out, item))
                for item in out.items]
        sent += [await self._send(self.topics.session_stored, records.stored_record(stored),
                                  stored["session_id"], self._parent(out, stored))
                 for stored in out.to_deliver]
        return sent

    # --- tracing (on only): each record's trace goes on in what it caused ----------------------
    def _trace(self, tracer: Tracer, inputs: list[Any], source: dict[int, Any],
               records_: int) -> None:
        """A ``process <topic>`` span per record that gave inputs, child of the context its
        headers carry, from here to the batch's acks; each input's context by source key (an
        answer given before its decision: by request id)."""
        opened: dict[int, Context] = {}
        for inp in inputs:
            raw = source[id(inp)]
            ctx = opened.get(id(raw))
            if ctx is None:
                span = tracing.start_consume(tracer, raw, **{
                    "messaging.batch.message_count": records_,
                    "session_core.session_id": str(inp.get("session_id"))})
                self.spans.append(span)
                ctx = opened[id(raw)] = tracing.in_context(span) or Context()
            self.parents[source_key(inp)] = ctx
            if inp.get("request_id"):
                self.parents[f"request:{inp['request_id']}"] = ctx

    def _parent(self, out: Outputs, made: dict[str, Any], request_id: Any = None
                ) -> Context | None:
        if not self.parents:
            return None
        key = out.origins.get(id(made))
        if key is None and request_id is not None:
            key = f"request:{request_id}"
        return self.parents.get(key) if key is not None else None

    def _end_spans(self, exc: BaseException | None) -> None:
        if not self.spans:
            return
        for span in self.spans:
            if exc is not None:
                tracing.fail(span, exc)
            span.end()
        self.spans.clear()
        self.parents.clear()

    async def _probe(self, held: list[tuple[tuple[Any, int], list[Any]]]) -> None:
        """Look up the first record (standing for any input) of each partition whose assignment
        window is open: if the journal does not hold it, it holds nothing after it
        (``DecidedState.probed``)."""
        firsts: dict[Any, tuple[int, str]] = {}
        for (tp, offset), found in held:
            if found and tp in self.decided.unprobed and tp not in firsts:
                firsts[tp] = (offset, source_key(found[0]))
        if firsts:
            journaled = await self.repo.journaled(key for _, key in firsts.values())
            for tp, (offset, key) in firsts.items():
                self.decided.probed(tp, key in journaled, offset)

    async def _send(self, topic: str, record: dict[str, Any], key: str,
                    parent: Context | None = None) -> Awaitable[Any]:
        """Hand one record to the producer; the returned future resolves when it is acked."""
        if parent is None:
            return await self.send(topic, encode(record), key.encode())
        return await self.send(topic, encode(record), key.encode(), parent)


def _committed(consumer: Any) -> Callable[[str, int], Awaitable[int | None]] | None:
    """The group's committed offset of a partition, as ``PublishOrder`` asks for it."""
    if consumer is None:
        return None

    async def committed(topic: str, partition: int) -> int | None:
        offset: int | None = await consumer.committed(TopicPartition(topic, partition))
        return offset

    return committed


def positions(raws: tuple[Any, ...]) -> list[tuple[TopicPartition, int]]:
    return [(TopicPartition(r.topic, r.partition), r.offset) for r in raws]

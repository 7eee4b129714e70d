"""receipt-tracker — decides from native observations whether a function result was applied.

From the moment a ``function_result`` delivery is handed to the Runtime (the delivery record's
Kafka timestamp) it waits at most the receipt window (10 s) for the exact native receipt
(``shared.domain.receipts``). Verdicts go to storage as ``application`` facts; each is claimed in
the store first (``receipt_verdicts``, unique ``_id``), so two replicas never both publish one.
Pending calls are persisted (``pending_receipts``): after a restart overdue calls turn
``uncertain`` at once and the rest keep their original deadline. One heap holds every deadline.
Core never replays a result."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict, deque
from typing import Any

from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pymongo import ASCENDING
from pymongo.errors import BulkWriteError

from shared import records
from shared.domain.deadlines import DeadlineQueue
from shared.domain.receipts import (
    REASON_TIMEOUT,
    CallRecord,
    Expected,
    Log,
    NotAMatch,
    Publish,
    State,
    joined_key,
    match_observation,
    part_keys,
)
from shared.kafka import (
    DeadLetters,
    broker_send,
    ensure_topics,
    make_broker,
    max_record_bytes,
    publish,
)
from shared.logging import bound, get_logger
from shared.service import decode_batch, raw_decoder
from shared.settings import Settings
from shared.store import Doc, database, delete_by_ids, find_by_ids, make_client, ping
from shared.topics import topics_for

log = get_logger(__name__)
GROUP = "session-core-receipts"
DONE_KEPT = 10_000  # terminal calls remembered to log late receipts
EARLY_OBSERVATIONS = 64  # per Session, kept for observations that overtake their delivery

Key = tuple[str, str]  # (session_id, call_id)


def _expected_doc(e: Expected) -> Doc:
    return {
        "harness": e.harness, "session_id": e.session_id, "call_id": e.call_id, "name": e.name,
        "success": e.success, "content": [{"kind": k, "digest": d} for k, d in e.content],
        "native_session_id": e.native_session_id, "thread_id": e.thread_id,
        "turn_id": e.turn_id, "joined": e.joined,
    }


def _expected_from(doc: Doc) -> Expected:
    return Expected(
        harness=doc["harness"], session_id=doc["session_id"], call_id=doc["call_id"],
        name=doc["name"], success=doc["success"],
        content=tuple((p["kind"], bytes(p["digest"])) for p in doc["content"]),
        native_session_id=doc.get("native_session_id"), thread_id=doc.get("thread_id"),
        turn_id=doc.get("turn_id"),
        joined=bytes(doc["joined"]) if doc.get("joined") is not None else None,
    )


class ReceiptService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.window = settings.receipt_window_s
        self.topics = topics_for(settings)
        self.broker: KafkaBroker = make_broker(settings, "session-core-receipts")
        self.client = make_client(settings)
        self.db = database(self.client, settings)
        self.dlq = DeadLetters(broker_send(self.broker), self.topics)
        self.schemas = {self.topics.runtime_deliveries: frozenset({records.DELIVERY}),
                        self.topics.runtime_observations: frozenset({records.OBSERVATION})}
        self.calls: dict[Key, CallRecord] = {}
        self.by_session: dict[str, set[str]] = defaultdict(set)
        self.deadlines: DeadlineQueue[Key] = DeadlineQueue()
        self.early: dict[str, deque[tuple[float, Doc]]] = defaultdict(
            lambda: deque(maxlen=EARLY_OBSERVATIONS))
        self.wake = asyncio.Event()
        self.timer: asyncio.Task[None] | None = None
        self.settling: set[asyncio.Task[Any]] = set()  # deletes of settled pending records
        self.lateness: list[float] = []
        self.done: dict[str, dict[str, CallRecord]] = defaultdict(dict)
        self.done_order: deque[Key] = deque()  # seconds past the deadline at which verdicts fired
        self.broker.subscriber(
            self.topics.runtime_deliveries,
            group_id=self.topics.group(GROUP),
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=max_record_bytes(settings),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            decoder=raw_decoder,
            batch=True,
            max_records=500,
            batch_timeout_ms=10,
        )(self.on_deliveries)
        self.broker.subscriber(
            self.topics.runtime_observations,
            group_id=self.topics.group(f"{GROUP}-observations"),
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=max_record_bytes(settings),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            decoder=raw_decoder,
            batch=True,
            max_records=500,
            batch_timeout_ms=10,
        )(self.on_observations)

    # ---- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await self.db.pending_receipts.create_index([("session_id", ASCENDING)],
                                                    name="pending_session")
        await self.recover()  # every pending deadline is tracked before a consumer runs
        await self.broker.start()  # the verdicts below need the producer
        await self.fire_due(time.time())  # calls that fell due while no tracker ran
        self.timer = asyncio.create_task(self._timer_loop(), name="receipt-deadlines")
        log.info("receipts.started", pending=len(self.calls), window_s=self.window)

    async def stop(self) -> None:
        if self.timer:
            self.timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.timer
        await self.broker.stop()
        if self.settling:
            await asyncio.gather(*self.settling, return_exceptions=True)
        await self.client.close()

    async def ready(self) -> bool:
        return await ping(self.client) and await self.broker.ping(timeout=2.0)

    async def recover(self) -> None:
        """Reload pending calls with their original deadlines; ``start`` then turns the overdue
        ones ``uncertain`` at once (publishing needs the broker, which starts after this)."""
        async for doc in self.db.pending_receipts.find({}):
            self._track(_expected_from(doc["expected"]), doc["deadline"])

    def _track(self, expected: Expected, deadline: float) -> CallRecord:
        key = (expected.session_id, expected.call_id)
        rec = CallRecord(expected=expected, window=self.window)
        rec.deadline = deadline
        self.calls[key] = rec
        self.by_session[expected.session_id].add(expected.call_id)
        self.deadlines.add(key, deadline)
        self.wake.set()
        return rec

    def _forget(self, key: Key) -> None:
        self.calls.pop(key, None)
        self.deadlines.cancel(key)
        ids = self.by_session.get(key[0])
        if ids is not None:
            ids.discard(key[1])
            if not ids:
                self.by_session.pop(key[0], None)

    # ---- deliveries open the window ---------------------------------------------------------
    async def on_deliveries(self, body: Any, msg: KafkaMessage) -> None:
        batch = [(rec, raw.timestamp / 1000.0)
                 for raw, rec in await decode_batch(self.dlq, msg.raw_message, self.schemas)
                 if rec.get("kind") == "function_result"]
        if batch:
            await self.open_calls(batch)

    async def open_call(self, rec: Doc, handed_at: float) -> None:
        await self.open_calls([(rec, handed_at)])

    async def open_calls(self, batch: list[tuple[Doc, float]]) -> None:
        """Open a window per delivered result, a whole consumer batch at a time: one query per
        collection and one bulk insert, not a handful of round trips per call."""
        fresh: dict[Key, tuple[Doc, float]] = {}
        for rec, handed_at in batch:
            key = (rec["session_id"], rec["call_id"])
            if key in self.calls or key[1] in self.done.get(key[0], {}) or key in fresh:
                continue  # redelivered: a window is never extended, a verdict never repeated
            fresh[key] = (rec, handed_at)
        if not fresh:
            return
        # A redelivery this tracker has forgotten (a restart, a rebalance) may reopen a call a
        # verdict was already claimed for: its claim then fails and nothing is published twice
        # (publish_verdicts). No per-batch query of the claims: on the dev store (FerretDB)
        # an ``$in`` scans the whole, ever-growing collection.
        ids = [f"{sid}/{cid}" for sid, cid in fresh]
        calls, session_docs = await asyncio.gather(
            find_by_ids(self.db.calls, ids),
            find_by_ids(self.db.sessions, [sid for sid, _ in fresh]))
        harness = {k: d.get("harness", "") for k, d in session_docs.items()}
        opened: list[tuple[Expected, float]] = []
        docs: list[Doc] = []
        for (sid, cid), (rec, handed_at) in fresh.items():
            call = calls.get(f"{sid}/{cid}") or {}
            native = call.get("native") or {}
            expected = Expected(
                harness=harness.get(sid, ""), session_id=sid, call_id=cid,
                name=rec.get("name") or call.get("name") or "", success=bool(rec["success"]),
                content=part_keys(rec["content"]),
                native_session_id=native.get("session_id"), thread_id=native.get("thread_id"),
                turn_id=native.get("turn_id"), joined=joined_key(rec["content"]),
            )
            deadline = handed_at + self.window
            opened.append((expected, deadline))
            docs.append({"_id": f"{sid}/{cid}", "session_id": sid,
                         "expected": _expected_doc(expected), "deadline": deadline,
                         "handed_at": handed_at})
        # A deadline already stored (a replica or an earlier run opened the call) is the one
        # kept: insert, and read back only the ones that were there.
        stored: dict[str, float] = {}
        try:
            await self.db.pending_receipts.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            dup = [docs[int(e["index"])]["_id"] for e in exc.details.get("writeErrors", [])
                   if e.get("code") == 11000]
            if len(dup) != len(exc.details.get("writeErrors", [])):
                raise
            stored = {k: d["deadline"]
                      for k, d in (await find_by_ids(self.db.pending_receipts, dup)).items()}
        now = time.time()
        for expected, deadline in opened:
            sid, cid = expected.session_id, expected.call_id
            deadline = stored.get(f"{sid}/{cid}", deadline)
            self._track(expected, deadline)
            if len(opened) <= 10:
                with bound(session_id=sid, call_id=cid):
                    log.info("receipts.pending", deadline_in_s=round(deadline - now, 3))
        if len(opened) > 10:
            log.info("receipts.pending_batch", opened=len(opened), pending=len(self.calls))
        # Observations that overtook their delivery.
        for sid in {e.session_id for e, _ in opened}:
            for seen_at, obs in list(self.early.get(sid, ())):
                await self.observe(obs, seen_at)

    # ---- observations decide -------------------------------------------------------------
    async def on_observations(self, body: Any, msg: KafkaMessage) -> None:
        for raw, rec in await decode_batch(self.dlq, msg.raw_message, self.schemas):
            await self.observe(rec, time.time(), observed_ts=raw.timestamp / 1000.0)

    async def observe(self, obs: Doc, now: float, observed_ts: float | None = None) -> None:
        sid = obs.get("session_id")
        if not isinstance(sid, str):
            return
        # When the observation was produced counts, not when we read it (a lagging consumer
        # must not turn a timely receipt into a late one).
        at = min(now, observed_ts) if observed_ts else now
        refusal = obs.get("refusal")
        for cid, done in list(self.done.get(sid, {}).items()):
            late = match_observation(done.expected, obs) if refusal is None else None
            if late is not None and not isinstance(late, NotAMatch):
                with bound(session_id=sid, call_id=cid):
                    await self._step((sid, cid), done.observe(late, at))
        call_ids = list(self.by_session.get(sid, ()))
        if not call_ids:
            self.early[sid].append((at, obs))
            return
        for cid in call_ids:
            key = (sid, cid)
            rec = self.calls.get(key)
            if rec is None:
                continue
            with bound(session_id=sid, call_id=cid):
                if isinstance(refusal, dict):
                    if refusal.get("call_id") == cid:
                        await self._step(key, rec.refused(str(refusal.get("reason"))))
                    continue
                verdict = match_observation(rec.expected, obs)
                if isinstance(verdict, NotAMatch):
                    log.debug("receipts.not_a_match", field=verdict.field, reason=verdict.reason)
                    continue
                await self._step(key, rec.observe(verdict, at))

    async def _step(self, key: Key, step: Publish | Log | None) -> None:
        if step is None:
            return
        if isinstance(step, Log):
            log.warning(f"receipts.{step.event}", state=str(step.state))
            return
        await self.publish_verdict(key, step)

    async def publish_verdict(self, key: Key, step: Publish) -> None:
        await self.publish_verdicts([(key, step)])

    async def publish_verdicts(self, verdicts: list[tuple[Key, Publish]]) -> None:
        """Claim, publish and settle verdicts in bulk: one insert for the claims, the facts
        sent together (the producer batches them), one delete for the pending records."""
        if not verdicts:
            return
        now = time.time()
        docs = [{"_id": f"{sid}/{cid}", "state": str(step.state), "reason": step.reason,
                 "by": id(self), "at": now} for (sid, cid), step in verdicts]
        lost: set[int] = set()
        try:
            await self.db.receipt_verdicts.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            for err in exc.details.get("writeErrors", []):
                if err.get("code") != 11000:
                    raise
                lost.add(int(err["index"]))
        mine = [v for i, v in enumerate(verdicts) if i not in lost]
        for i in sorted(lost):
            sid, cid = verdicts[i][0]
            log.info("receipts.verdict_already_claimed", session_id=sid, call_id=cid)
            self._forget(verdicts[i][0])
        claimed: list[tuple[Key, Publish]] = []
        if lost:
            # Someone claimed these first. Its verdict may never have been published (a crash
            # between claim and publish), so publish the *claimed* verdict again: the fact id
            # is the call's, and storage applies one fact id once — one Item, never two
            # different verdicts.
            lost_ids = [str(docs[i]["_id"]) for i in lost]
            for c in (await find_by_ids(self.db.receipt_verdicts, lost_ids)).values():
                sid, _, cid = c["_id"].partition("/")
                claimed.append(((sid, cid), Publish(cid, State(c["state"]), c["reason"])))
            await delete_by_ids(self.db.pending_receipts, lost_ids)
        await asyncio.gather(*(publish(self.broker, self.topics.core_facts, {
            "schema": records.FACT, "fact_id": f"rcpt:{sid}/{cid}", "session_id": sid,
            "kind": "application", "call_id": cid, "state": str(step.state),
            "reason": step.reason}, sid) for (sid, cid), step in [*mine, *claimed]))
        published = time.time()
        if mine:
            # Off the timer's path (a delete is a scan on the dev store). Should the tracker
            # stop before it lands, the restarted one finds the claim and only forgets the call.
            task = asyncio.create_task(delete_by_ids(  # noqa: RUF006
                self.db.pending_receipts, [f"{sid}/{cid}" for (sid, cid), _ in mine]))
            self.settling.add(task)
            task.add_done_callback(self.settling.discard)
        for key, step in mine:
            sid, cid = key
            if len(mine) <= 10:
                log.info("receipts.verdict", session_id=sid, call_id=cid,
                         state=str(step.state), reason=step.reason)
            # Terminal: keep the record a while so a late receipt is logged, never acted on.
            rec = self.calls.get(key)
            self._forget(key)
            if rec is None:
                continue
            if step.reason == REASON_TIMEOUT.format(window=self.window) and rec.deadline:
                self.lateness.append(published - rec.deadline)
            self.done[sid][cid] = rec
            self.done_order.append(key)
            while len(self.done_order) > DONE_KEPT:
                osid, ocid = self.done_order.popleft()
                self.done.get(osid, {}).pop(ocid, None)
                if not self.done.get(osid):
                    self.done.pop(osid, None)
        if len(mine) > 10:
            log.info("receipts.verdict_batch", published=len(mine))

    # ---- the one timer ----------------------------------------------------------------------
    async def fire_due(self, now: float) -> int:
        """Every call whose deadline has passed turns ``uncertain``, published in one batch.
        ``lateness`` records, per timeout verdict, how long after its deadline it was out."""
        due = self.deadlines.pop_due(now)
        verdicts: list[tuple[Key, Publish]] = []
        for key in due:
            rec = self.calls.get(key)
            if rec is None:
                continue
            step = rec.expire(now)
            if isinstance(step, Publish):
                verdicts.append((key, step))
            else:
                with bound(session_id=key[0], call_id=key[1]):
                    await self._step(key, step)
        await self.publish_verdicts(verdicts)
        return len(due)

    async def _timer_loop(self) -> None:
        while True:
            nxt = self.deadlines.next_deadline()
            delay = 1.0 if nxt is None else max(0.0, min(1.0, nxt - time.time()))
            self.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), delay)
            try:
                await self.fire_due(time.time())
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("receipts.timer_failed")
                await asyncio.sleep(0.5)

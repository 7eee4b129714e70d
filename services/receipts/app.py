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
import json
import time
from collections import defaultdict, deque
from dataclasses import replace
from typing import Any

from aiokafka import ConsumerRebalanceListener, TopicPartition
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pymongo import ASCENDING, DeleteOne
from pymongo.errors import BulkWriteError

from services.receipts.progress import ReadUpTo
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
from shared.metrics import RECEIPT_VERDICT_SECONDS, RECEIPT_VERDICTS
from shared.service import decode_batch, raw_decoder
from shared.settings import Settings
from shared.store import Doc, database, delete_by_ids, find_by_ids, make_client, ping
from shared.topics import topics_for

log = get_logger(__name__)
GROUP = "session-core-receipts"
DONE_KEPT = 10_000  # terminal calls remembered to log late receipts
LATENESS_KEPT = 100_000  # the last timeout verdicts' lateness (diagnostics, bench)
FIRING_MAX = 4  # verdict batches in flight at once (claim + publish), so one slow round trip
# does not hold back the deadlines that fall due while it runs
RETRY_S = 0.5  # a failed verdict batch goes again after this
EARLY_SWEEP_S = 30.0  # how often stored early observations older than the window are dropped
EARLY_KEPT = 4096  # observations no tracked call took, kept for a delivery that is read later

Key = tuple[str, str]  # (session_id, call_id)


class _Assignment(ConsumerRebalanceListener):  # type: ignore[misc]
    """Tells ``ReadUpTo`` what the observations consumer holds."""

    def __init__(self, service: ReceiptService) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.service.read.revoke()
        self.service.read_changed.set()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        topic = self.service.topics.runtime_observations
        self.service.read.assign(tp.partition for tp in assigned if tp.topic == topic)
        self.service.read_changed.set()


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
        self.unresolved: set[Key] = set()  # tracked calls whose native ids are not read yet
        self.deadlines: DeadlineQueue[Key] = DeadlineQueue()
        # Observations no tracked call took, per Session, for a delivery read after them (the
        # two records travel on two topics). Kept one window, at most EARLY_KEPT in all.
        self.early: dict[str, deque[tuple[float, Doc]]] = {}
        # early observations not yet in the store: written before the batch's offsets commit,
        # so a tracker killed before the delivery comes still has them after its restart
        self.unsaved_early: list[Doc] = []
        self.early_swept = 0.0
        self.early_order: deque[tuple[float, str]] = deque()
        self.wake = asyncio.Event()
        self.timer: asyncio.Task[None] | None = None
        self.settling: set[asyncio.Task[Any]] = set()  # deletes of settled pending records
        self.lateness: deque[float] = deque(maxlen=LATENESS_KEPT)
        self.firing: set[asyncio.Task[None]] = set()
        self.unsent: dict[Key, Publish] = {}  # verdicts whose publication failed, retried
        self.fire_slots = asyncio.Semaphore(FIRING_MAX)
        self.done: dict[str, dict[str, CallRecord]] = defaultdict(dict)
        self.done_order: deque[Key] = deque()  # seconds past the deadline at which verdicts fired
        # Deadlines are decided only up to ``read_up_to``: every observation appended before it
        # has been read (``progress``). ``want_read`` asks the follower to move it on.
        self.read = ReadUpTo()
        self.read_up_to = 0.0
        self.read_changed = asyncio.Event()
        self.want_read = asyncio.Event()
        self.follower: asyncio.Task[None] | None = None
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
        self.observations = self.broker.subscriber(
            self.topics.runtime_observations,
            group_id=self.topics.group(f"{GROUP}-observations"),
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=max_record_bytes(settings),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            decoder=raw_decoder,
            batch=True,
            max_records=500,
            batch_timeout_ms=10,
            listener=_Assignment(self),
        )
        self.observations(self.on_observations)

    # ---- lifecycle ----------------------------------------------------------------------
    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await self.db.pending_receipts.create_index([("session_id", ASCENDING)],
                                                    name="pending_session")
        await self.recover()  # every pending deadline is tracked before a consumer runs
        await self.broker.start()  # the verdicts need the producer
        # Calls that fell due while no tracker ran are decided by the timer like the others,
        # once the observations consumer has read what was published before their deadlines.
        self.follower = asyncio.create_task(self._follow_observations(), name="receipt-reads")
        self.timer = asyncio.create_task(self._timer_loop(), name="receipt-deadlines")
        log.info("receipts.started", pending=len(self.calls), window_s=self.window)

    async def stop(self) -> None:
        for task in (self.timer, self.follower):
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.firing:  # verdict batches under way finish (their claims are in the store)
            await asyncio.gather(*self.firing, return_exceptions=True)
        await self.broker.stop()
        if self.settling:
            await asyncio.gather(*self.settling, return_exceptions=True)
        await self.client.close()

    async def ready(self) -> bool:
        return await ping(self.client) and await self.broker.ping(timeout=2.0)

    async def recover(self) -> None:
        """Reload pending calls with their original deadlines; ``start`` then turns the overdue
        ones ``uncertain`` at once (publishing needs the broker, which starts after this). The
        observations kept for a delivery not yet read come back too (their offsets are
        committed: Kafka will not send them again)."""
        async for doc in self.db.pending_receipts.find({}):
            self._track(_expected_from(doc["expected"]), doc["deadline"],
                        resolved=doc.get("resolved", True))
        horizon = time.time() - self.window
        kept = [d async for d in self.db.early_observations.find({})]
        for d in sorted(kept, key=lambda d: d["at"]):
            if d["at"] >= horizon:
                self._keep_early(d["session_id"], json.loads(d["obs"]), d["at"], save=False)

    async def _save_early(self) -> None:
        """Persist the early observations of this batch (one insert), and now and then drop
        the ones older than the window."""
        docs, self.unsaved_early = self.unsaved_early, []
        if docs:
            with contextlib.suppress(BulkWriteError):  # a redelivered batch: already there
                await self.db.early_observations.insert_many(docs, ordered=False)
        now = time.time()
        if now - self.early_swept > EARLY_SWEEP_S:
            self.early_swept = now
            await self.db.early_observations.delete_many({"at": {"$lt": now - self.window}})

    async def resolve(self, sids: set[str] | list[str]) -> None:
        """Fill in what matching needs beyond the delivery — the Session's harness and the
        call's native ids, as storage recorded them — for the tracked calls of ``sids`` that
        lack it. Called before an observation of those Sessions is matched."""
        keys = [(sid, cid) for sid in sids for cid in self.by_session.get(sid, ())
                if (sid, cid) in self.unresolved]
        if not keys:
            return
        calls, sessions = await asyncio.gather(
            find_by_ids(self.db.calls, [f"{sid}/{cid}" for sid, cid in keys]),
            find_by_ids(self.db.sessions, list(dict.fromkeys(sid for sid, _ in keys))))
        for key in keys:
            rec = self.calls.get(key)
            self.unresolved.discard(key)
            if rec is None:
                continue
            call = calls.get(f"{key[0]}/{key[1]}") or {}
            native = call.get("native") or {}
            rec.expected = replace(
                rec.expected, harness=(sessions.get(key[0]) or {}).get("harness", ""),
                name=rec.expected.name or call.get("name") or "",
                native_session_id=native.get("session_id"), thread_id=native.get("thread_id"),
                turn_id=native.get("turn_id"))

    def _track(self, expected: Expected, deadline: float, resolved: bool = True) -> CallRecord:
        key = (expected.session_id, expected.call_id)
        rec = CallRecord(expected=expected, window=self.window)
        rec.deadline = deadline
        self.calls[key] = rec
        self.by_session[expected.session_id].add(expected.call_id)
        self.deadlines.add(key, deadline)
        if not resolved:
            self.unresolved.add(key)
        self.wake.set()
        return rec

    def _forget(self, key: Key) -> None:
        self.calls.pop(key, None)
        self.deadlines.cancel(key)
        self.unresolved.discard(key)
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
        """Open a window per delivered result, a whole consumer batch at a time: one bulk insert
        of the pending records, no read."""
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
        # (publish_verdicts). Nothing is read here: what matching needs beyond the delivery
        # (the harness, the call's native ids) is read when an observation of the Session comes
        # (``resolve``) — a timeout needs none of it, and the deadline path stays one insert.
        opened: list[tuple[Expected, float]] = []
        docs: list[Doc] = []
        for (sid, cid), (rec, handed_at) in fresh.items():
            expected = Expected(
                harness="", session_id=sid, call_id=cid, name=rec.get("name") or "",
                success=bool(rec["success"]), content=part_keys(rec["content"]),
                joined=joined_key(rec["content"]),
            )
            deadline = handed_at + self.window
            opened.append((expected, deadline))
            docs.append({"_id": f"{sid}/{cid}", "session_id": sid,
                         "expected": _expected_doc(expected), "resolved": False,
                         "deadline": deadline, "handed_at": handed_at})
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
            self._track(expected, deadline, resolved=False)
            if len(opened) <= 10:
                with bound(session_id=sid, call_id=cid):
                    log.info("receipts.pending", deadline_in_s=round(deadline - now, 3))
        if len(opened) > 10:
            log.info("receipts.pending_batch", opened=len(opened), pending=len(self.calls))
        # Observations that overtook their delivery, offered to the calls just opened only (a
        # call already tracked has seen them).
        await self.resolve({e.session_id for e, _ in opened if e.session_id in self.early})
        for expected, _ in opened:
            key = (expected.session_id, expected.call_id)
            for seen_at, obs in list(self.early.get(key[0], ())):
                call = self.calls.get(key)
                if call is None:
                    break
                with bound(session_id=key[0], call_id=key[1]):
                    await self._offer(key, call, obs, seen_at)

    # ---- observations decide -------------------------------------------------------------
    async def on_observations(self, body: Any, msg: KafkaMessage) -> None:
        batch = await decode_batch(self.dlq, msg.raw_message, self.schemas)
        await self.resolve({sid for _, rec in batch
                            if isinstance(sid := rec.get("session_id"), str)})
        for raw, rec in batch:
            await self.observe(rec, time.time(), observed_ts=raw.timestamp / 1000.0)
        await self._save_early()
        raws = msg.raw_message if isinstance(msg.raw_message, tuple) else (msg.raw_message,)
        for r in raws:  # dead-lettered ones included: they are handled too
            self.read.handled_record(r.partition, r.offset)
        self.read_changed.set()

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
        await self.resolve([sid])
        taken = False
        for cid in list(self.by_session.get(sid, ())):
            key = (sid, cid)
            rec = self.calls.get(key)
            if rec is None:
                continue
            with bound(session_id=sid, call_id=cid):
                taken = await self._offer(key, rec, obs, at) or taken
        if not taken:
            # Its call's delivery may not have been read yet (another topic, another consumer):
            # keep it for that call, whether or not other calls of the Session are pending.
            self._keep_early(sid, obs, at)

    async def _offer(self, key: Key, rec: CallRecord, obs: Doc, at: float) -> bool:
        """Apply one observation to one tracked call; ``True`` when it was about that call."""
        refusal = obs.get("refusal")
        if isinstance(refusal, dict):
            if refusal.get("call_id") != key[1]:
                return False
            await self._step(key, rec.refused(str(refusal.get("reason"))))
            return True
        if refusal is not None:
            return False
        verdict = match_observation(rec.expected, obs)
        if isinstance(verdict, NotAMatch):
            log.debug("receipts.not_a_match", field=verdict.field, reason=verdict.reason)
            return False
        await self._step(key, rec.observe(verdict, at))
        return True

    def _keep_early(self, sid: str, obs: Doc, at: float, save: bool = True) -> None:
        if save:
            self.unsaved_early.append({"_id": f"{sid}/{at!r}/{len(self.unsaved_early)}",
                                       "session_id": sid, "at": at, "obs": json.dumps(obs)})
        queue = self.early.get(sid)
        if queue is None:
            queue = self.early[sid] = deque()
        queue.append((at, obs))
        order = self.early_order
        order.append((at, sid))
        horizon = time.time() - self.window
        while order and (len(order) > EARLY_KEPT or order[0][0] < horizon):
            _, osid = order.popleft()
            oq = self.early.get(osid)
            if oq:
                oq.popleft()
                if not oq:
                    del self.early[osid]

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
            task = asyncio.create_task(self._settle(  # noqa: RUF006
                [f"{sid}/{cid}" for (sid, cid), _ in mine]))
            self.settling.add(task)
            task.add_done_callback(self.settling.discard)
        for key, step in mine:
            sid, cid = key
            if len(mine) <= 10:
                log.info("receipts.verdict", session_id=sid, call_id=cid,
                         state=str(step.state), reason=step.reason)
            # Terminal: keep the record a while so a late receipt is logged, never acted on.
            rec = self.calls.get(key)
            RECEIPT_VERDICTS.labels(str(step.state)).inc()
            if rec is not None and rec.deadline:  # handed over at deadline − window
                RECEIPT_VERDICT_SECONDS.observe(max(0.0, published - rec.deadline + self.window))
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

    async def _settle(self, ids: list[str]) -> None:
        """Delete settled pending records: one round trip of ``_id`` equality deletes (an
        ``$in`` would scan the collection on FerretDB v1, holding the store's write lock)."""
        with contextlib.suppress(BulkWriteError):  # already gone: nothing to do
            await self.db.pending_receipts.bulk_write([DeleteOne({"_id": i}) for i in ids],
                                                      ordered=False)

    # ---- the one timer ----------------------------------------------------------------------
    def expire_due(self, now: float) -> list[tuple[Key, Publish]]:
        """Pop every call whose deadline has passed (the heap: no scan of pending calls) and
        turn it ``uncertain``; a verdict whose publication failed before comes back as it was."""
        verdicts: list[tuple[Key, Publish]] = []
        for key in self.deadlines.pop_due(now):
            unsent = self.unsent.pop(key, None)
            if unsent is not None:
                verdicts.append((key, unsent))
                continue
            rec = self.calls.get(key)
            if rec is None:
                continue
            step = rec.expire(now)
            if isinstance(step, Publish):
                verdicts.append((key, step))
            elif isinstance(step, Log):
                log.warning(f"receipts.{step.event}", session_id=key[0], call_id=key[1])
        return verdicts

    async def fire_due(self, now: float) -> int:
        """Every call whose deadline has passed turns ``uncertain``, published in one batch.
        ``lateness`` records, per timeout verdict, how long after its deadline it was out."""
        verdicts = self.expire_due(now)
        await self._publish_or_retry(verdicts)
        return len(verdicts)

    async def _publish_or_retry(self, verdicts: list[tuple[Key, Publish]]) -> None:
        try:
            await self.publish_verdicts(verdicts)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The store or the broker is away: the same verdicts go again shortly (a claim
            # that did land makes the retry republish the claimed verdict, never a second).
            log.exception("receipts.timer_failed", verdicts=len(verdicts))
            retry_at = time.time() + RETRY_S
            for key, step in verdicts:
                if key in self.calls:
                    self.unsent[key] = step
                    self.deadlines.add(key, retry_at)

    def decidable(self, now: float) -> float:
        """The latest deadline that may be decided now: passed, and with every observation
        appended before it read."""
        return min(now, self.read_up_to)

    async def _timer_loop(self) -> None:
        """Sleep until the earliest deadline (or a new call), pop what is due, and hand it to a
        verdict batch that runs beside the loop: the deadlines falling due while one batch's
        claim is in the store are popped and sent in the next (at most FIRING_MAX at once).
        A deadline that has passed but is not read up to yet waits for the follower."""
        while True:
            nxt = self.deadlines.next_deadline()
            now = time.time()
            delay = 1.0 if nxt is None else max(0.0, min(1.0, nxt - now))
            if nxt is not None and nxt <= now and nxt > self.read_up_to:
                self.want_read.set()
                delay = 1.0  # the follower wakes the loop when it has read on
            self.wake.clear()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), delay)
            if not self.deadlines.due(self.decidable(time.time())):
                continue
            await self.fire_slots.acquire()
            verdicts = self.expire_due(self.decidable(time.time()))
            if not verdicts:
                self.fire_slots.release()
                continue
            task = asyncio.create_task(self._fire_batch(verdicts))
            self.firing.add(task)
            task.add_done_callback(self.firing.discard)

    async def _fire_batch(self, verdicts: list[tuple[Key, Publish]]) -> None:
        try:
            await self._publish_or_retry(verdicts)
        finally:
            self.fire_slots.release()

    # ---- how far the observations are read -----------------------------------------------
    async def _follow_observations(self) -> None:
        """On request, move ``read_up_to`` to the time just before the observations' end
        offsets were taken, once the consumer has handled every assigned partition up to them.
        A broker that does not answer leaves it where it is (deadlines wait, they are stored);
        an assignment change starts the round again."""
        while True:
            await self.want_read.wait()
            self.want_read.clear()
            while True:
                try:
                    t0 = time.time()
                    if await self._read_to_end():
                        break
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.warning("receipts.read_position_failed", exc_info=True)
                    await asyncio.sleep(RETRY_S)
            self.read_up_to = max(self.read_up_to, t0)
            self.wake.set()

    async def _read_to_end(self) -> bool:
        """``True`` once every observation appended before the call was handled; ``False``
        when the assignment changed meanwhile (the caller takes a new ``t0``)."""
        consumer = self.observations.consumer
        gen = self.read.generation
        if consumer is None or self.read.assigned is None:
            await self._read_changed(gen)
            return False
        topic = self.topics.runtime_observations
        unknown = [TopicPartition(topic, p) for p in self.read.unknown()]
        if unknown:
            firsts = await consumer.beginning_offsets(unknown)
            for tp in unknown:
                committed = await consumer.committed(tp)
                # records before the log's start are gone: nothing there to wait for
                self.read.start_at(tp.partition, max(committed or 0, firsts.get(tp, 0)))
        tps = [TopicPartition(topic, p) for p in sorted(self.read.assigned or ())]
        if not tps:  # a member with no partitions has nothing to wait for
            return True
        ends = {tp.partition: off for tp, off in (await consumer.end_offsets(tps)).items()}
        while self.read.generation == gen:
            if self.read.reached(ends):
                return True
            await self._read_changed(gen)
        return False

    async def _read_changed(self, gen: int) -> None:
        """Wait for the consumer to handle a batch or for the assignment to change (with a
        ceiling, so a missed signal costs a second, not a hang)."""
        self.read_changed.clear()
        if self.read.generation != gen:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.read_changed.wait(), 1.0)

"""The receipt tracker's verdicts and its one timer (docs/receipts.md, "The deadline path"):
claim a verdict in the store, publish it, settle the call; pop the deadlines that are due and
decidable (``read_up_to``), turn them ``uncertain`` and publish them in batches beside the
timer loop; retry a batch that failed.

``Verdicts`` is that part of ``tracker.Tracker`` (its base class): the state it works on is the
tracker's, declared here and set in ``Tracker.__init__``."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from aiokafka import AIOKafkaProducer
from cachetools import FIFOCache
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from services.receipts.domain.deadlines import DeadlineQueue
from services.receipts.repository import Store
from shared import records, tracing
from shared.domain.receipts import REASON_TIMEOUT, CallRecord, Log, Publish, State
from shared.kafka import encode, send_counted
from shared.logging import get_logger
from shared.metrics import RECEIPT_VERDICT_SECONDS, RECEIPT_VERDICTS
from shared.pacing import rest_after
from shared.store import Doc
from shared.storekeys import call_key, verdict_fact_id

log = get_logger(__name__)
DONE_KEPT = 10_000  # terminal calls remembered to log late receipts
LATENESS_KEPT = 100_000  # the last timeout verdicts' lateness (diagnostics, bench)
FIRING_MAX = 4  # verdict batches in flight at once (claim + publish), so one slow round trip
# does not hold back the deadlines that fall due while it runs
RETRY_S = 0.5  # a failed verdict batch goes again after this
# Verdict batches start at least this far apart (the tracker's clock, seconds): the deadlines
# falling due meanwhile go in the next batch together. Each batch costs a "read up to" round
# trip, a claim transaction in the store and a produce request whatever its size; fired as soon
# as anything was due, at 1 000-2 000 timeouts/s the batches held 2-4 verdicts each and the
# tracker alone kept 1.5 of the machine's 2 cores busy (docs/receipts.md, "The deadline path").
FIRE_EVERY_S = 0.01
SETTLE_MAX = 200  # calls per background delete: the claims queued behind it wait less
# The deletes wait until no verdict batch was fired for SETTLE_QUIET_S, unless SETTLE_BACKLOG
# calls wait to be settled (then one delete at a time, as many as keep the backlog there): a
# FerretDB v1 delete costs ~0.3 ms a document, six times an insert, and while verdicts fall due
# the store's time goes to turning them into Items (docs/receipts.md, "The deadline path").
SETTLE_QUIET_S = 1.0
SETTLE_BACKLOG = 10_000  # also what a stop may have to delete (~3 s)
# After each delete the next waits SETTLE_PACE times as long as that one took (not while
# draining): the deletes take at most 1 / (1 + SETTLE_PACE) of the store's time, and storage,
# still turning the last verdicts into Items when they begin, the rest (storage's Session
# writer is paced the same way). A backlog only waits longer; the records stay correct.
SETTLE_PACE = 3.0

Key = tuple[str, str]  # (session_id, call_id)
# (facts[, parents]): ``parents`` only with tracing on (``Verdicts._send_traced``)
SendFacts = Callable[..., Awaitable[None]]


async def send_facts(producer: AIOKafkaProducer, topic: str, facts: list[Doc],
                     tracer: Tracer | None = None,
                     parents: Sequence[Context | None] | None = None) -> None:
    """Every fact handed to the producer first, then every ack awaited (storage's way): a
    third of the CPU of awaiting each publish, which at 2 000 timeouts/s was much of the
    verdicts' lateness. ``parents`` (tracing on): each fact's trace context."""
    if parents is None:
        acks = [await send_counted(producer, topic, encode(f),
                                   str(f["session_id"]).encode()) for f in facts]
    else:
        acks = [await send_counted(producer, topic, encode(f), str(f["session_id"]).encode(),
                                   tracer, parent)
                for f, parent in zip(facts, parents, strict=True)]
    await asyncio.gather(*acks)


def to_fact(sid: str, cid: str, step: Publish) -> Doc:
    return records.fact_record(sid, verdict_fact_id(sid, cid), {
        "kind": "application", "call_id": cid, "state": str(step.state),
        "reason": step.reason})


class Verdicts:
    store: Store
    send: SendFacts
    window: float
    clock: Callable[[], float]
    calls: dict[Key, CallRecord]
    deadlines: DeadlineQueue[Key]
    done: dict[str, dict[str, CallRecord]]
    done_order: deque[Key]
    lateness: deque[float]
    unsent: dict[Key, Publish]
    read_up_to: float
    want_read: asyncio.Event
    wake: asyncio.Event
    fire_slots: asyncio.Semaphore
    firing: set[asyncio.Task[None]]
    settling: set[asyncio.Task[None]]
    to_settle: list[str]
    last_fired: float  # the event loop's time of the last verdict batch
    fired_at: float  # the tracker's clock when the last verdict batch was started
    settle_now: asyncio.Event  # set while draining: the deletes do not wait
    tracer: Tracer | None  # tracing on: a ``receipts.verdict`` span per verdict
    traces: FIFOCache[Key, Context]  # each open call's delivery context (tracing on)

    def _forget(self, key: Key) -> None:
        """Stop tracking a call (the tracker's)."""
        raise NotImplementedError

    # ---- verdicts ---------------------------------------------------------------------------
    async def publish_verdicts(self, verdicts: list[tuple[Key, Publish]]) -> None:
        """Claim, publish and settle verdicts in bulk: one insert for the claims, the facts
        sent together, one delete per collection for what the calls leave behind."""
        if not verdicts:
            return
        self.last_fired = asyncio.get_running_loop().time()
        now = self.clock()
        docs = [{"_id": call_key(sid, cid), "state": str(step.state), "reason": step.reason,
                 "by": id(self), "at": now} for (sid, cid), step in verdicts]
        lost = await self.store.claim(docs)
        mine = [v for i, v in enumerate(verdicts) if i not in lost]
        claimed: list[tuple[Key, Publish]] = []
        if lost:
            # Someone claimed these first. Its verdict may never have been published (a crash
            # between claim and publish), so publish the *claimed* verdict again: the fact id
            # is the call's, and storage applies one fact id once — one Item, never two
            # different verdicts.
            lost_ids = [str(docs[i]["_id"]) for i in lost]
            for c in (await self.store.claims(lost_ids)).values():
                sid, _, cid = c["_id"].partition("/")
                claimed.append(((sid, cid), Publish(cid, State(c["state"]), c["reason"])))
        sending = [*mine, *claimed]
        facts = [to_fact(sid, cid, step) for (sid, cid), step in sending]
        if self.tracer is None:
            await self.send(facts)
        else:
            await self._send_traced(self.tracer, sending, facts)
        if lost:  # settled only once sent: a failed send is retried, also after a restart
            await self.store.settle([str(docs[i]["_id"]) for i in lost])
        for i in sorted(lost):
            log.info("receipts.verdict_already_claimed", session_id=verdicts[i][0][0],
                     call_id=verdicts[i][0][1])
            self._forget(verdicts[i][0])
        published = self.clock()
        if mine:
            # Off the timer's path. Should the tracker stop before it lands, the restarted one
            # finds the claim and only forgets the call.
            self._settle_later([call_key(s, c) for (s, c), _ in mine])
        for key, step in mine:
            self._decided(key, step, published, log_it=len(mine) <= 10)
        if len(mine) > 10:
            log.info("receipts.verdict_batch", published=len(mine))

    async def _send_traced(self, tracer: Tracer, sending: list[tuple[Key, Publish]],
                           facts: list[Doc]) -> None:
        """Each verdict a ``receipts.verdict`` span — child of the observation that decided it
        (its context current while it is observed: ``Tracker.observe_batch``), else of the
        call's delivery (a deadline) — its fact's ``send core.facts`` span under it."""
        now = tracing.current()
        spans = []
        for (sid, cid), step in sending:
            delivered = self.traces.pop((sid, cid), None)
            spans.append(tracer.start_span("receipts.verdict", context=now or delivered,
                                           attributes={"session_core.session_id": sid,
                                                       "session_core.call_id": cid,
                                                       "session_core.verdict.state":
                                                           str(step.state),
                                                       "session_core.verdict.reason":
                                                           step.reason or "",
                                                       "session_core.verdict.by":
                                                           "receipt" if now else "deadline"}))
        try:
            await self.send(facts, [tracing.in_context(s) for s in spans])
        except BaseException as exc:
            for s in spans:
                tracing.fail(s, exc)
            raise
        finally:
            for s in spans:
                s.end()

    def _settle_later(self, ids: list[str]) -> None:
        """Delete the settled calls' records in the background, one delete (of at most
        SETTLE_MAX calls) at a time: what is settled meanwhile goes in the next. (One task per
        verdict batch had dozens of deletes queued in the store before the next batches'
        claims: at 2 000 timeouts/s a claim waited up to 2 s.) They wait for a quiet moment
        (``_quiet``)."""
        self.to_settle.extend(ids)
        if all(t.done() for t in self.settling):
            task = asyncio.create_task(self._settle_queued())
            self.settling.add(task)
            task.add_done_callback(self.settling.discard)

    async def _quiet(self) -> None:
        """Until no verdict batch was fired for SETTLE_QUIET_S, SETTLE_BACKLOG calls wait, or a
        drain asks for the deletes now."""
        loop = asyncio.get_running_loop()
        while len(self.to_settle) < SETTLE_BACKLOG and not self.settle_now.is_set():
            rest = self.last_fired + SETTLE_QUIET_S - loop.time()
            if rest <= 0:
                return
            with contextlib.suppress(TimeoutError):  # a look at the backlog every 0.1 s
                await asyncio.wait_for(self.settle_now.wait(), min(rest, 0.1))

    async def _settle_queued(self) -> None:
        loop = asyncio.get_running_loop()
        while self.to_settle:
            await self._quiet()
            ids, self.to_settle = self.to_settle[:SETTLE_MAX], self.to_settle[SETTLE_MAX:]
            began = loop.time()
            try:
                await self.store.settle(ids)
            except asyncio.CancelledError:
                raise
            except Exception:  # the records stay: a restarted tracker finds the claims
                log.warning("receipts.settle_failed", calls=len(ids), exc_info=True)
            if self.to_settle:  # paced; a drain cuts the rest short
                await rest_after(began, SETTLE_PACE, self.settle_now)

    def _decided(self, key: Key, step: Publish, published: float, log_it: bool) -> None:
        sid, cid = key
        if log_it:
            log.info("receipts.verdict", session_id=sid, call_id=cid, state=str(step.state),
                     reason=step.reason)
        rec = self.calls.get(key)
        RECEIPT_VERDICTS.labels(str(step.state)).inc()
        if rec is not None and rec.deadline:  # handed over at deadline − window
            RECEIPT_VERDICT_SECONDS.observe(max(0.0, published - rec.deadline + self.window))
        self._forget(key)
        if rec is None:
            return
        if step.reason == REASON_TIMEOUT.format(window=self.window) and rec.deadline:
            self.lateness.append(published - rec.deadline)
        # Terminal: kept a while so a late receipt is logged, never acted on.
        self.done[sid][cid] = rec
        self.done_order.append(key)
        while len(self.done_order) > DONE_KEPT:
            osid, ocid = self.done_order.popleft()
            self.done.get(osid, {}).pop(ocid, None)
            if not self.done.get(osid):
                self.done.pop(osid, None)

    # ---- the one timer ----------------------------------------------------------------------
    def decidable(self, now: float) -> float:
        """The latest deadline that may be decided now: passed, and with every observation
        appended before it read."""
        return min(now, self.read_up_to)

    def expire_due(self, now: float) -> list[tuple[Key, Publish]]:
        """Pop every call whose deadline is at or before ``now`` (the heap: no scan of pending
        calls) and turn it ``uncertain``; a verdict whose publication failed before comes
        back as it was."""
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
        """Decide, in one batch, every call whose deadline is at or before ``now``."""
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
            self._retry_later(verdicts)

    def _retry_later(self, verdicts: list[tuple[Key, Publish]]) -> None:
        retry_at = self.clock() + RETRY_S
        for key, step in verdicts:
            if key in self.calls:
                self.unsent[key] = step
                self.deadlines.add(key, retry_at)

    def next_fire(self) -> float | None:
        """When the timer next starts a verdict batch: the earliest deadline, but not sooner
        than ``FIRE_EVERY_S`` after the last batch began (``None``: nothing pending)."""
        nxt = self.deadlines.next_deadline()
        return None if nxt is None else max(nxt, self.fired_at + FIRE_EVERY_S)

    async def run_timer(self) -> None:
        """Sleep until the next batch is due (``next_fire``; or a new call), pop what is
        decidable, and hand it to a verdict batch that runs beside the loop (at most FIRING_MAX
        at once). A deadline that has passed but is not read up to yet asks the reader to move
        on, and waits."""
        while True:
            at = self.next_fire()
            now = self.clock()
            delay = 1.0 if at is None else max(0.0, min(1.0, at - now))
            if at is not None and at <= now and self.read_up_to < at:
                self.want_read.set()
                delay = 1.0  # the reader wakes the loop when it has read on
            self.wake.clear()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), delay)
            at = self.next_fire()
            if at is None or at > self.clock():  # woken early: a new call, the reader
                continue
            if not self.deadlines.due(self.decidable(self.clock())):
                continue
            await self.fire_slots.acquire()
            self.fired_at = self.clock()
            verdicts = self.expire_due(self.decidable(self.fired_at))
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

    async def drain(self) -> None:
        """Let verdict batches under way finish (their claims are in the store) and the
        settling deletes land (at once: no quiet moment awaited)."""
        self.settle_now.set()
        try:
            for tasks in (self.firing, self.settling):
                if tasks:
                    await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self.settle_now.clear()


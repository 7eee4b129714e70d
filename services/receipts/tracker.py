"""The receipt tracker's rules: from native observations, decide whether a delivered function
result was applied.

From the moment a ``function_result`` delivery is handed to the Runtime (the delivery record's
Kafka timestamp) it waits at most the receipt window (10 s) for the exact native receipt
(``shared.domain.receipts``). Verdicts are published as ``application`` facts; each is claimed
in the store first, so two replicas never both publish one. Pending calls are stored: after a
restart each keeps its original deadline. One heap holds every deadline, and a deadline is
decided only once the observations published before it have been read (``read_up_to``).
Core never replays a result.

What matching needs beyond the delivery — the Session's harness, the function name, the call's
native ids — is learned from the harness's function-call observations on the same stream (the
tracker reads no other service's collection). Claiming and publishing verdicts, and the timer,
are in ``verdicts.py`` (the base class ``Verdicts``)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import replace

from cachetools import FIFOCache
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from services.receipts.domain.deadlines import DeadlineQueue
from services.receipts.repository import Store, expected_doc, expected_from
from services.receipts.verdicts import FIRING_MAX, LATENESS_KEPT, Key, SendFacts, Verdicts
from shared import tracing
from shared.domain.observations import CallOpened, classify_all
from shared.domain.receipts import (
    CallRecord,
    Expected,
    Log,
    NotAMatch,
    Publish,
    State,
    decidable_calls,
    joined_key,
    match_observation,
    part_keys,
)
from shared.logging import bound, get_logger
from shared.store import Doc
from shared.storekeys import call_key

log = get_logger(__name__)
EARLY_SWEEP_S = 30.0  # how often stored early observations older than the window are dropped
# Observations no tracked call took, kept for a delivery that is read later: only those that
# could decide a call not decided yet, at most EARLY_KEPT_PER_SESSION per Session (one
# Session's traffic never pushes out another's receipt) and EARLY_KEPT in all (memory).
EARLY_KEPT_PER_SESSION = 256
EARLY_KEPT = 65_536
TRACES_KEPT = 65_536  # open calls' delivery contexts kept (tracing on)


def obs_ids(obs: Doc) -> list[str]:
    """The call ids an observation is about (diagnostics: debug lines only)."""
    refusal = obs.get("refusal")
    if isinstance(refusal, dict):
        return [str(refusal.get("call_id"))]
    native = obs.get("native")
    if not isinstance(native, dict):
        return []
    params = native.get("params")
    if isinstance(params, dict):
        item = params.get("item")
        cid = item.get("id") if isinstance(item, dict) else params.get("callId")
        return [f"{native.get('method')}:{cid}:{params.get('turnId')}"]
    message = native.get("message")
    blocks = message.get("content") if isinstance(message, dict) else None
    if isinstance(blocks, list):
        return [f"{native.get('type')}:{b.get('tool_use_id') or b.get('id')}" for b in blocks
                if isinstance(b, dict) and b.get("type") in ("tool_result", "tool_use")]
    return [str(native.get("type") or native.get("method"))]


class Tracker(Verdicts):
    def __init__(self, store: Store, send: SendFacts, window: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.send = send
        self.window = window
        self.clock = clock
        self.calls: dict[Key, CallRecord] = {}
        self.by_session: dict[str, set[str]] = defaultdict(set)
        self.unresolved: set[Key] = set()  # tracked calls whose native ids are not known yet
        self.deadlines: DeadlineQueue[Key] = DeadlineQueue()
        # Observations no tracked call took, per Session, for a delivery read after them (the
        # two records travel on two topics): only those that may decide a call (``_may_decide``),
        # kept one window (and until the deliveries read cover them), at most
        # EARLY_KEPT_PER_SESSION per Session. ``early_order`` holds (time, Session) in arrival
        # order for the expiry; an entry whose observation went already is skipped.
        self.early: dict[str, deque[tuple[float, Doc]]] = {}
        self.early_order: deque[tuple[float, str]] = deque()
        self.early_count = 0
        # early observations not yet stored: written before the batch's offsets commit, so a
        # tracker killed before the delivery comes still has them after its restart
        self.unsaved_early: list[Doc] = []
        self.early_swept = 0.0
        self.done: dict[str, dict[str, CallRecord]] = defaultdict(dict)
        self.done_order: deque[Key] = deque()
        self.lateness: deque[float] = deque(maxlen=LATENESS_KEPT)  # s past the deadline
        self.unsent: dict[Key, Publish] = {}  # verdicts whose publication failed, retried
        # Deadlines up to ``read_up_to`` may be decided: every observation appended before it
        # has been read (``progress.StreamReader`` moves it on when ``want_read`` is set).
        self.read_up_to = 0.0
        self.want_read = asyncio.Event()
        # An observation kept for a later delivery is needed until every delivery handed over
        # before it has been read (a receipt follows its delivery): ``deliveries_read_up_to``.
        self.deliveries_read_up_to = 0.0
        self.want_deliveries_read = asyncio.Event()
        self.wake = asyncio.Event()
        self.fire_slots = asyncio.Semaphore(FIRING_MAX)
        self.firing: set[asyncio.Task[None]] = set()
        self.settling: set[asyncio.Task[None]] = set()
        self.to_settle: list[str] = []  # decided calls whose records are not deleted yet
        self.last_fired = -math.inf
        self.fired_at = -math.inf
        self.settle_now = asyncio.Event()
        # tracing (on only, set by the app): the deliveries' contexts by call, the contexts of
        # the observations being observed by id() (``observe_batch``)
        self.tracer: Tracer | None = None
        self.traces: FIFOCache[Key, Context] = FIFOCache(maxsize=TRACES_KEPT)
        self.obs_contexts: dict[int, Context] = {}

    def read_to(self, t0: float) -> None:
        self.read_up_to = max(self.read_up_to, t0)
        self.wake.set()

    def deliveries_read_to(self, t0: float) -> None:
        self.deliveries_read_up_to = max(self.deliveries_read_up_to, t0)
    def early_horizon(self, now: float) -> float:
        """Kept observations older than this are dropped: a window old, and with every delivery
        handed over before them read (a tracker down or lagging longer than a window must still
        find the receipt of a delivery it reads late)."""
        return min(now - self.window, self.deliveries_read_up_to)

    # ---- state ------------------------------------------------------------------------------
    async def recover(self) -> None:
        """Reload pending calls with their original deadlines, and the observations kept for
        a delivery not yet read (their offsets are committed: Kafka will not send them again)."""
        for doc in await self.store.pending():
            self._track(expected_from(doc["expected"]), doc["deadline"],
                        doc.get("handed_at"), resolved=doc.get("resolved", True),
                        runtime_id=doc.get("runtime_id"))
        horizon = self.early_horizon(self.clock())
        for d in sorted(await self.store.early(), key=lambda d: d["at"]):
            if d["at"] >= horizon:
                self._keep_early(d["session_id"], json.loads(d["obs"]), d["at"], save=False)
        if log.is_enabled_for(logging.DEBUG):
            log.debug("receipts.recovered", pending=sorted(call_key(s, c) for s, c in self.calls),
                      early=[f"{s}:{i}" for s, q in self.early.items() for _, o in q
                             for i in obs_ids(o)])
        await self._offer_kept()

    async def _offer_kept(self) -> None:
        """Offer the reloaded kept observations to the reloaded calls of their Sessions. A
        tracker killed after a call's pending record was stored but before the call took the
        receipt kept for it (or before its verdict's claim landed) leaves both in the store,
        and neither is read again: the observation's offset is committed, and a delivery read
        again does not reopen a tracked call. Before, a kept observation was offered only to
        calls opened later, and such a call ended ``uncertain`` at its deadline."""
        sids = [sid for sid in self.early if sid in self.by_session]
        if not sids:
            return
        await self.resolve(sids)
        for sid in sids:
            for seen_at, obs in list(self.early.get(sid, ())):
                for cid in list(self.by_session.get(sid, ())):
                    key = (sid, cid)
                    rec = self.calls.get(key)
                    if rec is None or rec.state is not State.PENDING:
                        continue
                    with bound(session_id=sid, call_id=cid):
                        try:
                            await self._offer(key, rec, obs, seen_at)
                        except Exception:  # its verdict is held for the timer to send again
                            log.warning("receipts.kept_offer_failed", exc_info=True)

    def _track(self, expected: Expected, deadline: float, handed_at: float | None = None,
               resolved: bool = True, schedule: bool = True,
               runtime_id: str | None = None) -> CallRecord:
        key = (expected.session_id, expected.call_id)
        rec = CallRecord(expected=expected, window=self.window, runtime_id=runtime_id)
        rec.deadline = deadline
        rec.handed_at = handed_at
        self.calls[key] = rec
        self.by_session[expected.session_id].add(expected.call_id)
        if schedule:
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

    def _resolve_with(self, key: Key, call: Doc) -> None:
        rec = self.calls.get(key)
        self.unresolved.discard(key)
        if rec is None:
            return
        native = call.get("native") or {}
        rec.expected = replace(
            rec.expected, harness=call.get("harness") or "",
            name=rec.expected.name or call.get("name") or "",
            native_session_id=native.get("session_id"), thread_id=native.get("thread_id"),
            turn_id=native.get("turn_id"))

    async def resolve(self, sids: set[str] | list[str]) -> None:
        """Fill in what matching needs beyond the delivery for the tracked calls of ``sids``
        that lack it, from the calls learned from function-call observations. A call not
        learned yet stays unresolved: its announcement is earlier on the same partition than
        any receipt of it, so it is known by the time a receipt is read."""
        keys = [(sid, cid) for sid in sids for cid in self.by_session.get(sid, ())
                if (sid, cid) in self.unresolved]
        if not keys:
            return
        found = await self.store.calls([call_key(sid, cid) for sid, cid in keys])
        for key in keys:
            call = found.get(call_key(*key))
            if call is not None:
                self._resolve_with(key, call)

    async def learn(self, observations: list[Doc]) -> None:
        """Remember the calls the harness announced (the function-call observations)."""
        docs: list[Doc] = []
        for obs in observations:
            sid, harness = obs.get("session_id"), obs.get("harness")
            if not isinstance(sid, str) or not isinstance(harness, str):
                continue
            for c in classify_all(harness, obs.get("native")):
                if isinstance(c, CallOpened):
                    doc = {"_id": call_key(sid, c.call_id), "session_id": sid, "harness": harness,
                           "name": c.name, "native": c.native_ids}
                    docs.append(doc)
                    if (sid, c.call_id) in self.unresolved:
                        self._resolve_with((sid, c.call_id), doc)
        if docs:
            await self.store.learn_calls(docs)

    # ---- deliveries open the window ---------------------------------------------------------
    async def open_call(self, rec: Doc, handed_at: float) -> None:
        await self.open_calls([(rec, handed_at)])

    async def open_calls(self, batch: list[tuple[Doc, float]]) -> None:
        """Open a window per delivered result, one bulk insert per batch. A redelivery never
        extends a window nor repeats a verdict; one this tracker has forgotten (a restart, a
        rebalance) keeps the stored deadline, and its claim fails if a verdict was claimed."""
        fresh: dict[Key, tuple[Doc, float]] = {}
        for rec, handed_at in batch:
            key = (rec["session_id"], rec["call_id"])
            if key in self.calls or key[1] in self.done.get(key[0], {}) or key in fresh:
                continue
            fresh[key] = (rec, handed_at)
        if not fresh:
            return
        opened: list[tuple[Expected, float]] = []
        docs: list[Doc] = []
        runtimes: dict[Key, str | None] = {}  # the Runtime each result was delivered to
        for (sid, cid), (rec, handed_at) in fresh.items():
            expected = Expected(
                harness="", session_id=sid, call_id=cid, name=rec.get("name") or "",
                success=bool(rec["success"]), content=part_keys(rec["content"]),
                joined=joined_key(rec["content"]),
            )
            deadline = handed_at + self.window
            opened.append((expected, deadline))
            runtimes[(sid, cid)] = rec.get("runtime_id")
            docs.append({"_id": call_key(sid, cid), "session_id": sid,
                         "expected": expected_doc(expected), "resolved": False,
                         "deadline": deadline, "handed_at": handed_at,
                         "runtime_id": rec.get("runtime_id")})
        stored = await self.store.open_pending(docs)
        now = self.clock()
        for expected, deadline in opened:
            sid, cid = expected.session_id, expected.call_id
            deadline = stored.get(call_key(sid, cid), deadline)
            # not on the timer yet: only once offered what was kept for it (below)
            self._track(expected, deadline, deadline - self.window, resolved=False,
                        schedule=False, runtime_id=runtimes[(sid, cid)])
            if len(opened) <= 10:
                with bound(session_id=sid, call_id=cid):
                    log.info("receipts.pending", deadline_in_s=round(deadline - now, 3))
        if len(opened) > 10:
            log.info("receipts.pending_batch", opened=len(opened), pending=len(self.calls))
        keys = [(e.session_id, e.call_id) for e, _ in opened]
        try:
            await self._offer_early([e for e, _ in opened])
        except BaseException:
            # The batch fails and is read again: the calls it opened that are undecided yet
            # are forgotten, so reading it again opens them again (with the stored deadline)
            # and offers them what was kept. Tracked, they were skipped and never offered it.
            for key in keys:
                call = self.calls.get(key)
                if call is not None and call.state is State.PENDING:
                    self._forget(key)
            raise
        finally:
            self._schedule(keys)

    def _schedule(self, keys: list[Key]) -> None:
        """Put opened calls on the timer. Only now: a call opened after its deadline (read
        late: a restart, a rebalance, a lagging deliveries consumer) whose receipt was read
        first, and kept, was otherwise decided ``uncertain`` by the timer — the observations
        being read past its deadline — while ``_offer_early`` was still on its way to it (a
        store look-up, the verdicts of the calls before it in the batch)."""
        for key in keys:
            rec = self.calls.get(key)
            if rec is not None and rec.deadline is not None and key not in self.deadlines:
                self.deadlines.add(key, rec.deadline)  # a verdict retried is there already
        self.wake.set()

    async def _offer_early(self, opened: list[Expected]) -> None:
        """Observations that overtook their delivery, offered to the calls just opened only."""
        await self.resolve({e.session_id for e in opened if e.session_id in self.early})
        for expected in opened:
            key = (expected.session_id, expected.call_id)
            if log.is_enabled_for(logging.DEBUG):
                log.debug("receipts.opened", session_id=key[0], call_id=key[1],
                          unresolved=key in self.unresolved,
                          early=[i for _, o in self.early.get(key[0], ()) for i in obs_ids(o)])
            if key in self.unresolved and self.early.get(key[0]):
                await self.resolve([key[0]])  # kept while the look-up above was under way
            for seen_at, obs in list(self.early.get(key[0], ())):
                call = self.calls.get(key)
                if call is None:
                    break
                with bound(session_id=key[0], call_id=key[1]):
                    await self._offer(key, call, obs, seen_at)

    # ---- observations decide -------------------------------------------------------------
    async def observe_batch(self, batch: list[tuple[Doc, float]]) -> None:
        """One consumer batch of observations with their Kafka timestamps: learn the calls
        announced, decide, and store what was kept for later deliveries — all before the
        batch's offsets commit."""
        await self.learn([obs for obs, _ in batch])
        await self.resolve({sid for obs, _ in batch
                            if isinstance(sid := obs.get("session_id"), str)})
        contexts = self.obs_contexts
        for obs, ts in batch:
            if not contexts:  # tracing off (or nothing traced in this batch)
                await self.observe(obs, self.clock(), observed_ts=ts)
                continue
            # the Runtime's ``send`` span current: the parent of the verdict it decides
            with tracing.within(contexts.get(id(obs))):
                await self.observe(obs, self.clock(), observed_ts=ts)
        await self.save_early()

    async def observe(self, obs: Doc, now: float, observed_ts: float | None = None) -> None:
        sid = obs.get("session_id")
        if not isinstance(sid, str):
            return
        # When the observation was produced counts, not when it is read (a lagging consumer
        # must not turn a timely receipt into a late one).
        at = min(now, observed_ts) if observed_ts else now
        refusal = obs.get("refusal")
        for cid, done in list(self.done.get(sid, {}).items()):
            late = (match_observation(done.expected, obs)
                    if refusal is None and done.from_its_runtime(obs) else None)
            if late is not None and not isinstance(late, NotAMatch):
                with bound(session_id=sid, call_id=cid):
                    await self._step((sid, cid), done.observe(late, at))
        # Offered to every call of the Session, each once its announced ids are filled in. A
        # call opened while this runs (the deliveries consumer runs beside it) is offered too:
        # it may have looked for kept observations before this one is kept. Only once no call
        # is left is the observation kept, with no wait in between — a call opened from then
        # on finds it kept.
        taken = False
        offered: set[str] = set()
        while todo := [c for c in self.by_session.get(sid, ()) if c not in offered]:
            await self.resolve([sid])  # the calls in ``todo``, tracked before it
            for cid in todo:
                offered.add(cid)
                key = (sid, cid)
                rec = self.calls.get(key)
                if rec is None:
                    continue
                with bound(session_id=sid, call_id=cid):
                    taken = await self._offer(key, rec, obs, at) or taken
        kept = not taken and self._may_decide(sid, obs)
        if kept:
            # its delivery may be read later (another topic): kept, other calls pending or not
            self._keep_early(sid, obs, at)
        if log.is_enabled_for(logging.DEBUG):
            log.debug("receipts.observed", session_id=sid, ids=obs_ids(obs), at=at,
                      taken=taken, kept=kept, offered=sorted(offered),
                      unresolved=sorted(c for c in offered if (sid, c) in self.unresolved))

    async def _offer(self, key: Key, rec: CallRecord, obs: Doc, at: float) -> bool:
        """Apply one observation to one tracked call; ``True`` when it was about that call.
        Only the Runtime the result was delivered to speaks for it (docs/security.md)."""
        if not rec.from_its_runtime(obs):
            log.debug("receipts.other_runtime", runtime_id=obs.get("runtime_id"),
                      delivered_to=rec.runtime_id)
            return False
        refusal = obs.get("refusal")
        if isinstance(refusal, dict):
            if refusal.get("call_id") != key[1]:
                return False
            await self._step(key, rec.refused(str(refusal.get("reason"))))
            return True
        if refusal is not None:
            return False
        if rec.printed_before_delivery(at):
            # the ordering rule (CallRecord): not about this delivery, whatever it reads like
            log.debug("receipts.printed_before_delivery", at=at, handed_at=rec.handed_at)
            return False
        verdict = match_observation(rec.expected, obs)
        if isinstance(verdict, NotAMatch):
            log.debug("receipts.not_a_match", field=verdict.field, reason=verdict.reason)
            return False
        await self._step(key, rec.observe(verdict, at))
        return True

    def _may_decide(self, sid: str, obs: Doc) -> bool:
        """Whether an observation no tracked call took can still decide a call of its Session
        — one not decided yet, whose delivery may be read later: a refusal, a receipt or a
        release (``decidable_calls``). Chatter (agent messages, reasoning, replayed echoes,
        Subagent records) and records of calls already decided never enter the buffer."""
        done = self.done.get(sid, {})
        return any(cid not in done for cid in decidable_calls(obs))

    def _keep_early(self, sid: str, obs: Doc, at: float, save: bool = True) -> None:
        if save:
            # unique per observation (two of a Session may share a millisecond and an index)
            self.unsaved_early.append({"_id": f"{sid}/{uuid.uuid4().hex}",
                                       "session_id": sid, "at": at, "obs": json.dumps(obs)})
        queue = self.early.get(sid)
        if queue is None:
            queue = self.early[sid] = deque()
        queue.append((at, obs))
        self.early_count += 1
        if len(queue) > EARLY_KEPT_PER_SESSION:
            queue.popleft()  # this Session's oldest; its ``early_order`` entry is skipped
            self.early_count -= 1
        order = self.early_order
        order.append((at, sid))
        now = self.clock()
        if order and order[0][0] < now - self.window:
            self.want_deliveries_read.set()  # may it go? only once the deliveries are read on
        horizon = self.early_horizon(now)
        while order and (self.early_count > EARLY_KEPT or order[0][0] < horizon):
            oat, osid = order.popleft()
            oq = self.early.get(osid)
            # the Session's oldest is this entry's observation, or older (gone already: skip)
            if oq and oq[0][0] <= oat:
                oq.popleft()
                self.early_count -= 1
                if not oq:
                    del self.early[osid]

    async def save_early(self) -> None:
        """Store this batch's early observations (one insert); now and then drop the stored
        ones older than the window."""
        docs, self.unsaved_early = self.unsaved_early, []
        if docs:
            await self.store.keep_early(docs)
            if log.is_enabled_for(logging.DEBUG):
                log.debug("receipts.early_saved", ids=[
                    f"{d['session_id']}:{i}" for d in docs
                    for i in obs_ids(json.loads(d["obs"]))])
        now = self.clock()
        if now - self.early_swept > EARLY_SWEEP_S:
            self.early_swept = now
            await self.store.sweep_early(self.early_horizon(now))

    async def _step(self, key: Key, step: Publish | Log | None) -> None:
        if step is None:
            return
        if isinstance(step, Log):
            log.warning(f"receipts.{step.event}", state=str(step.state))
            return
        try:
            await self.publish_verdicts([(key, step)])
        except Exception:
            # The call holds its verdict already, so a redelivered batch would not decide it
            # again: the timer publishes it (the batch still fails, and is read again).
            self._retry_later([(key, step)])
            raise

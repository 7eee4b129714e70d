"""The receipt tracker's rules on the in-memory store (tests/support/fakes/receipts.py): a few
scenarios spelled out, then a hypothesis state machine that plays random orders of
announcements, deliveries, redeliveries, receipts (exact or not), refusals, observations read
late, receipts that overtake their delivery, restarts (orderly or kill -9), broker blips and
clock ticks, and checks after every step:

* one verdict per call (a republished claim is the same fact), never one for a call not
  delivered, never anything but an ``application`` fact (Core never replays a result);
* ``applied`` iff an exact live receipt was printed within the window of the first delivery
  (after it was handed over, before any refusal); ``failed`` iff the Runtime refused first;
  ``uncertain`` otherwise;
* at the end, every delivered call has its verdict."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from services.receipts.progress import ReadUpTo
from services.receipts.tracker import EARLY_KEPT, EARLY_KEPT_PER_SESSION, Tracker
from services.receipts.verdicts import RETRY_S
from tests.support.budget import examples
from tests.support.fakes.receipts import (
    Clock,
    Facts,
    MemoryReceiptStore,
    announced,
    codex_announced,
    codex_completed,
    delivery,
    receipt,
    refusal,
    tracker,
)

WINDOW = 10.0
Doc = dict[str, Any]
Key = tuple[str, str]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# ---- scenarios ----------------------------------------------------------------------------------

def test_an_exact_receipt_in_the_window_is_applied_and_a_replayed_one_is_not() -> None:
    store, facts, clock = MemoryReceiptStore(), Facts(), Clock()
    t = tracker(store, facts, clock)

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), clock()), (announced("s", "b"), clock())])
        await t.open_calls([(delivery("s", "a"), clock()), (delivery("s", "b"), clock())])
        clock.now += 3
        await t.observe_batch([(receipt("s", "b", isReplay=True), clock()),
                               (receipt("s", "a"), clock())])
        clock.now += WINDOW
        t.read_up_to = clock()
        await t.fire_due(t.decidable(clock()))
        await t.drain()

    run(scenario())
    got = {k: [f["state"] for f in v] for k, v in facts.verdicts().items()}
    assert got == {"s/a": ["applied"], "s/b": ["uncertain"]}
    assert store.pending_receipts == {} and store.receipt_calls == {}


def test_a_refusal_fails_the_call_even_before_its_delivery_is_read() -> None:
    store, facts, clock = MemoryReceiptStore(), Facts(), Clock()
    t = tracker(store, facts, clock)

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), clock()), (announced("s", "b"), clock())])
        await t.open_call(delivery("s", "a"), clock())  # A pending: B's refusal is still kept
        await t.observe_batch([(refusal("s", "b"), clock())])
        await t.open_call(delivery("s", "b"), clock() - 0.05)

    run(scenario())
    assert {k: [f["state"] for f in v] for k, v in facts.verdicts().items()} == {
        "s/b": ["failed"]}


def test_a_receipt_read_after_the_deadline_counts_when_the_deadline_waited_for_it() -> None:
    facts, clock = Facts(), Clock()
    t = tracker(MemoryReceiptStore(), facts, clock)

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), clock())])
        handed = clock()
        await t.open_call(delivery("s", "a"), handed)
        printed = handed + 1
        clock.now = handed + WINDOW + 5  # the observations consumer lags behind the receipt
        t.read_up_to = printed - 0.001
        assert await t.fire_due(t.decidable(clock())) == 0
        await t.observe_batch([(receipt("s", "a"), printed)])

    run(scenario())
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["applied"]


def test_a_receipt_printed_before_its_delivery_was_handed_over_does_not_confirm_it() -> None:
    """Seed: the pending call clears when the adapter confirms native application of the
    delivered result. A record printed before the result was handed to the Runtime cannot be
    the harness applying it, even when it reads exactly like the receipt (it is kept, the
    delivery is read later, and it must not be offered as its receipt)."""
    facts, clock = Facts(), Clock()
    t = tracker(MemoryReceiptStore(), facts, clock)
    at = clock()

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), at - 1), (receipt("s", "a"), at)])
        await t.open_call(delivery("s", "a"), at + 0.5)  # handed over after the record
        clock.now = at + 0.5 + WINDOW + 1
        t.read_up_to = clock()
        await t.fire_due(t.decidable(clock()))
        await t.drain()

    run(scenario())
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["uncertain"]


@pytest.mark.parametrize("release_first", [True, False], ids=["release-first", "result-first"])
def test_a_codex_release_never_confirms_a_bare_failed_result(release_first: bool) -> None:
    """Issue 57 item 1: ``{"success": false}`` is delivered as ``[]``; Codex's release of the
    unanswered call (an interrupt) is ``item/completed`` failed / false / ``[]``. Printed 2 s
    before the result was delivered it must not confirm it; printed after, it cannot be told
    from the harness applying the answer, and a possible release is no confirmation: the
    verdict is ``uncertain`` either way, never ``applied``."""
    facts, clock = Facts(), Clock()
    t = tracker(MemoryReceiptStore(), facts, clock)
    at = clock()
    release = codex_completed("s", "a", [], success=False)
    bare = {**delivery("s", "a", success=False), "content": []}

    async def scenario() -> None:
        await t.observe_batch([(codex_announced("s", "a"), at - 1)])
        if release_first:
            await t.observe_batch([(release, at)])
            await t.open_call(bare, at + 2)
        else:
            await t.open_call(bare, at)
            await t.observe_batch([(release, at + 2)])
        clock.now = at + 2 + WINDOW + 1
        t.read_up_to = clock()
        await t.fire_due(t.decidable(clock()))
        await t.drain()

    run(scenario())
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["uncertain"]


def test_read_up_to_needs_an_assignment_and_every_partition_handled() -> None:
    r = ReadUpTo()
    assert not r.reached({0: 0})  # no assignment yet: nothing is known
    r.assign([0, 1])
    assert r.unknown() == [0, 1]
    r.start_at(0, 5)
    r.start_at(1, 7)
    assert not r.reached({0: 6, 1: 7})
    r.handled_record(0, 5)
    assert r.reached({0: 6, 1: 7})
    r.handled_record(2, 100)  # not ours: ignored
    assert r.unknown() == []
    r.revoke()
    assert not r.reached({0: 0, 1: 0})
    r.assign([])
    assert r.reached({})  # a member with no partitions has nothing to wait for


class Killed(BaseException):
    """kill -9: the store got the write, the tracker never saw the answer."""


class KilledAfter(MemoryReceiptStore):
    """The store a tracker is killed against: the write named ``after`` lands, then the
    tracker dies (its task never resumes)."""

    def __init__(self, after: str) -> None:
        super().__init__()
        self.after = after

    async def open_pending(self, docs: list[Doc]) -> dict[str, float]:
        kept = await super().open_pending(docs)
        if self.after == "open_pending":
            raise Killed
        return kept

    async def claim(self, docs: list[Doc]) -> set[int]:
        if self.after == "before_claim":
            raise Killed  # the claim never reached the store
        return await super().claim(docs)


# ---- the state machine ---------------------------------------------------------------------------

SIDS = ("s1", "s2")
CIDS = ("c1", "c2", "c3", "c4")
KEYS = st.tuples(st.sampled_from(SIDS), st.sampled_from(CIDS))


class TrackerMachine(RuleBasedStateMachine):
    @initialize()
    def setup(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.store, self.facts, self.clock = KilledAfter(""), Facts(), Clock()
        self.t: Tracker = self.new_tracker()
        self.queue: list[tuple[Doc, float]] = []  # observations printed, not read yet
        self.announced: set[Key] = set()
        self.handed: dict[Key, float] = {}  # first delivery's timestamp
        self.printed: dict[Key, list[tuple[float, str]]] = {}  # (ts, "exact" | "refusal")

    def teardown(self) -> None:
        if not hasattr(self, "loop"):
            return
        try:
            self.clock.now += 3 * WINDOW
            self.facts.fail = 0
            self.read(len(self.queue))
            for _ in range(3):  # verdicts whose publication failed go again
                self.tick(RETRY_S)
            got = self.facts.verdicts()
            missing = [k for k in self.handed if f"{k[0]}/{k[1]}" not in got]
            assert not missing, f"delivered calls without a verdict: {missing}"
        finally:
            self.loop.close()

    def new_tracker(self) -> Tracker:
        t = tracker(self.store, self.facts, self.clock, WINDOW)
        self.loop.run_until_complete(t.recover())
        return t

    def run(self, coro: Any) -> Any:
        out = self.loop.run_until_complete(coro)
        self.loop.run_until_complete(self.t.drain())
        return out

    def print_obs(self, obs: Doc) -> None:
        self.queue.append((obs, self.clock()))

    # -- the Runtime and the dispatcher
    @rule(key=KEYS)
    def announce(self, key: Key) -> None:
        if key not in self.announced:
            self.announced.add(key)
            self.print_obs(announced(*key))

    @precondition(lambda self: any(k not in self.handed for k in self.announced))
    @rule(data=st.data())
    def deliver(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(k for k in self.announced
                                               if k not in self.handed)))
        self.handed[key] = self.clock()
        self.open(key)

    def open(self, key: Key) -> None:
        """The deliveries consumer reads the record; a batch that fails is read again."""
        for _ in range(2):
            try:
                self.run(self.t.open_call(delivery(*key), self.handed[key]))
                return
            except ConnectionError:
                continue

    @precondition(lambda self: bool(self.handed))
    @rule(data=st.data())
    def redeliver(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.handed)))
        self.open(key)  # the same record again

    @precondition(lambda self: bool(self.handed))
    @rule(data=st.data(), kind=st.sampled_from(["exact", "replayed", "synthetic", "other_text",
                                                 "subagent"]))
    def print_receipt(self, data: st.DataObject, kind: str) -> None:
        key = data.draw(st.sampled_from(sorted(self.handed)))
        if any(k == "refusal" for _, k in self.printed.get(key, [])):
            return  # a refused result is not applied
        variants: dict[str, dict[str, Any]] = {
            "replayed": {"isReplay": True}, "synthetic": {"isSynthetic": True},
            "subagent": {"parent_tool_use_id": "toolu_parent"}}
        native = variants.get(kind, {})
        text = "something else" if kind == "other_text" else "ok"
        self.print_obs(receipt(*key, text, **native))
        if kind == "exact":
            self.printed.setdefault(key, []).append((self.clock(), "exact"))

    @precondition(lambda self: bool(self.handed))
    @rule(data=st.data())
    def print_refusal(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.handed)))
        if self.printed.get(key) or self.clock() >= self.handed[key] + WINDOW:
            return  # the Runtime refuses at once, and never a result it applied
        self.print_obs(refusal(*key))
        self.printed.setdefault(key, []).append((self.clock(), "refusal"))

    @precondition(lambda self: any(k not in self.handed for k in self.announced))
    @rule(data=st.data(), crash_between=st.booleans(),
          crash_in=st.sampled_from(["", "open_pending", "before_claim"]))
    def receipt_overtakes_delivery(self, data: st.DataObject, crash_between: bool,
                                   crash_in: str) -> None:
        """The receipt is read before its delivery record (two topics, two consumers); the
        tracker may be killed before the delivery is read, or while it opens the call (after
        the pending record is stored, or before the verdict's claim lands)."""
        key = data.draw(st.sampled_from(sorted(k for k in self.announced
                                               if k not in self.handed)))
        handed = self.clock()
        self.handed[key] = handed
        self.clock.now += 0.01
        self.print_obs(receipt(*key))
        self.printed.setdefault(key, []).append((self.clock(), "exact"))
        self.read(len(self.queue))
        if crash_between:
            self.restart(kill=True)
        self.clock.now += 0.01
        if crash_in:
            self.store.after = crash_in
            self.loop.run_until_complete(self.killed(self.t.open_call(delivery(*key), handed)))
            self.store.after = ""
            self.restart(kill=True)
        self.open(key)

    @precondition(lambda self: any(k not in self.handed for k in self.announced))
    @rule(data=st.data(), read_first=st.booleans())
    def record_printed_before_delivery(self, data: st.DataObject, read_first: bool) -> None:
        """A record that reads exactly like the receipt is printed before the result is handed
        over (read before or after the delivery): it is not the harness applying it."""
        key = data.draw(st.sampled_from(sorted(k for k in self.announced
                                               if k not in self.handed)))
        self.print_obs(receipt(*key))
        self.printed.setdefault(key, []).append((self.clock(), "exact"))
        if read_first:
            self.read(len(self.queue))
        self.clock.now += 0.01
        self.handed[key] = self.clock()
        self.open(key)

    @staticmethod
    async def killed(coro: Any) -> None:
        with contextlib.suppress(Killed):
            await coro

    # -- the tracker's consumers, clock and faults
    @rule(n=st.integers(min_value=1, max_value=4))
    def read(self, n: int) -> None:
        batch, self.queue = self.queue[:n], self.queue[n:]
        if not batch:
            return
        try:
            self.run(self.t.observe_batch(batch))
        except ConnectionError:  # not committed: the consumer reads the batch again
            self.queue = batch + self.queue

    @rule(dt=st.sampled_from([0.0, 0.3, 1.7, 4.1, 6.9, 11.3]))
    def tick(self, dt: float) -> None:
        self.clock.now += dt
        # the readers: observations read up to just before the oldest unread one, every
        # delivery read (deliveries are read at once here)
        self.t.read_to(self.queue[0][1] - 1e-6 if self.queue else self.clock())
        self.t.deliveries_read_to(self.clock())
        self.run(self.t.fire_due(self.t.decidable(self.clock())))

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        if kill:  # what was under way is lost: settling deletes may not have landed
            for task in list(self.t.settling):
                task.cancel()
            self.loop.run_until_complete(asyncio.sleep(0))
        else:
            self.loop.run_until_complete(self.t.drain())
        self.t = self.new_tracker()

    @rule()
    def broker_blip(self) -> None:
        self.facts.fail = 1

    # -- what must hold
    def expected(self, key: Key) -> str:
        deadline = self.handed[key] + WINDOW
        for ts, kind in sorted(self.printed.get(key, [])):
            if self.handed[key] <= ts <= deadline:  # printed after the hand-over, in time
                return "applied" if kind == "exact" else "failed"
        return "uncertain"

    @invariant()
    def one_verdict_per_call_and_the_right_one(self) -> None:
        if not hasattr(self, "facts"):
            return
        for call, sent in self.facts.verdicts().items():
            sid, cid = call.split("/")
            assert (sid, cid) in self.handed, f"a verdict for {call}, never delivered"
            assert all(f["kind"] == "application" and f["fact_id"] == f"rcpt:{call}"
                       for f in sent), sent
            assert len({(f["state"], f["reason"]) for f in sent}) == 1, \
                f"{call}: two different verdicts {sent}"
            assert sent[0]["state"] == self.expected((sid, cid)), (
                f"{call}: {sent[0]['state']} ({sent[0]['reason']}), expected "
                f"{self.expected((sid, cid))}; delivered {self.handed[(sid, cid)]}, printed "
                f"{self.printed.get((sid, cid))}")


TrackerMachine.TestCase.settings = settings(max_examples=examples(150), stateful_step_count=30,
                                            deadline=None)
test_tracker_state_machine = TrackerMachine.TestCase


def test_observations_kept_in_two_batches_at_the_same_millisecond_both_survive_a_restart() -> None:
    store, facts, clock = MemoryReceiptStore(), Facts(), Clock()
    t = tracker(store, facts, clock)
    at = clock()

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), at - 1)])
        # two batches, each holding one observation of the Session printed in the same ms
        await t.observe_batch([(receipt("s", "a"), at)])
        await t.observe_batch([(receipt("s", "zz"), at)])
        restarted = tracker(store, facts, clock)
        await restarted.recover()
        await restarted.open_call(delivery("s", "a"), at - 0.5)
        await restarted.drain()

    run(scenario())
    assert len(store.early_observations) == 2  # both receipts
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["applied"]


def test_a_receipt_kept_for_its_delivery_is_not_crowded_out_by_other_observations() -> None:
    """After a restart the backlog holds every observation printed while no tracker ran; only
    what can decide a call (a receipt, a release, a refusal) competes for the kept places."""
    facts, clock = Facts(), Clock()
    t = tracker(MemoryReceiptStore(), facts, clock)
    at = clock()
    chatter = [({"schema": "runtime.observation/1", "session_id": f"s{i % 50}",
                 "harness": "codex", "native": {"method": "item/agentMessage/delta",
                                                "params": {"delta": "x"}}}, at + 0.001 * i)
               for i in range(EARLY_KEPT + 10)]

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), at - 1), (receipt("s", "a"), at)])
        await t.observe_batch(chatter)
        await t.open_call(delivery("s", "a"), at - 0.5)
        await t.drain()

    run(scenario())
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["applied"]



def _codex_agent_message(sid: str, n: int) -> Doc:
    return {"schema": "runtime.observation/1", "session_id": sid, "harness": "codex",
            "native": {"method": "item/completed", "params": {
                "threadId": "th-1", "turnId": "tu-1",
                "item": {"type": "agentMessage", "id": f"msg_{n}", "text": "thinking"}}}}


def _claude_echo(sid: str, n: int) -> Doc:
    return {"schema": "runtime.observation/1", "session_id": sid, "harness": "claude_code",
            "native": {"type": "user", "uuid": f"echo-{n}", "session_id": "native-1",
                       "parent_tool_use_id": None, "isReplay": True,
                       "message": {"role": "user", "content": [{"type": "text",
                                                                "text": "steer"}]}}}


def _claude_replayed_result(sid: str, n: int) -> Doc:
    return receipt(sid, f"old-{n}", isReplay=True)


def _other_sessions_receipts(sid: str, n: int) -> Doc:
    return codex_completed(f"other-{n % 50}", f"c{n}", [{"type": "inputText", "text": "x"}])


CHATTER = {"codex agent messages": _codex_agent_message, "claude isReplay echoes": _claude_echo,
           "claude replayed tool results": _claude_replayed_result,
           "other Sessions' receipts": _other_sessions_receipts}


@pytest.mark.parametrize("harness", ["codex", "claude_code"])
@pytest.mark.parametrize("n", [100, 4100])
@pytest.mark.parametrize("kind", sorted(CHATTER))
def test_a_receipt_that_overtook_its_delivery_survives_any_amount_of_chatter(
        harness: str, n: int, kind: str) -> None:
    """Issue 57 item 2. Seed: the pending call clears when the adapter confirms native
    application within 10 s. A receipt read before its delivery record (two topics) is kept for
    it; what is read in between — completions of other items, replayed echoes, other
    Sessions' receipts — cannot decide this Session's call and must not push it out: 100 or
    4 100 of them, the verdict is ``applied``."""
    facts, clock = Facts(), Clock()
    t = tracker(MemoryReceiptStore(), facts, clock)
    handed = clock()
    if harness == "codex":
        announce = codex_announced("s", "a")
        rcpt = codex_completed("s", "a", [{"type": "inputText", "text": "ok"}])
    else:
        announce, rcpt = announced("s", "a"), receipt("s", "a")
    make = CHATTER[kind]
    chatter = [(make("s", i), handed + 0.02 + 0.000_001 * i) for i in range(n)]

    async def scenario() -> None:
        await t.observe_batch([(announce, handed - 1), (rcpt, handed + 0.01)])
        await t.observe_batch(chatter)
        await t.open_call(delivery("s", "a"), handed)
        await t.drain()

    run(scenario())
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["applied"]


def test_the_early_buffer_is_bounded_per_session() -> None:
    """One Session's deciding observations push out only its own oldest: the buffer holds at
    most EARLY_KEPT_PER_SESSION per Session, and another Session's kept receipt stays."""
    facts, clock = Facts(), Clock()
    t = tracker(MemoryReceiptStore(), facts, clock)
    at = clock()
    flood = [(receipt("busy", f"c{i}"), at + 0.001 * i)
             for i in range(EARLY_KEPT_PER_SESSION + 10)]

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), at - 1), (receipt("s", "a"), at)])
        await t.observe_batch(flood)
        await t.open_call(delivery("s", "a"), at - 0.5)
        await t.drain()

    run(scenario())
    assert len(t.early["busy"]) == EARLY_KEPT_PER_SESSION
    kept = [o["native"]["message"]["content"][0]["tool_use_id"] for _, o in t.early["busy"]]
    assert kept[0] == "c10" and kept[-1] == f"c{EARLY_KEPT_PER_SESSION + 9}"  # its ten oldest went
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["applied"]


@pytest.mark.parametrize("killed", ["open_pending", "before_claim"])
def test_a_kept_receipt_is_offered_to_the_call_a_restarted_tracker_reloads(killed: str) -> None:
    """The chaos row `kill -9 receipts`: the receipt (printed 10 ms after the delivery) is read
    first and kept (stored, its offset committed); the delivery is read and its pending record
    stored, then the tracker is killed before the call took the kept receipt (or before the
    verdict's claim landed). The restarted tracker reloads both the call and the receipt; the
    delivery is not read again (or is, and is skipped: the call is tracked already). Before the
    fix the kept receipt was offered only to calls opened later, never to a reloaded one, and
    the call ended `uncertain` at its deadline."""
    store, facts, clock = KilledAfter(killed), Facts(), Clock()
    t = tracker(store, facts, clock)
    handed = clock()

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), handed - 1)])
        await t.observe_batch([(receipt("s", "a"), handed + 0.01)])  # overtook its delivery
        assert len(store.early_observations) == 1
        with pytest.raises(Killed):
            await t.open_call(delivery("s", "a"), handed)
        assert "s/a" in store.pending_receipts and not store.receipt_verdicts
        store.after = ""
        clock.now += 3  # down 3 s
        restarted = tracker(store, facts, clock)
        await restarted.recover()
        await restarted.open_call(delivery("s", "a"), handed)  # read again: skipped
        clock.now = handed + WINDOW + 1
        restarted.read_up_to = clock()
        await restarted.fire_due(restarted.decidable(clock()))
        await restarted.drain()

    run(scenario())
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["applied"]


class OpensDuringLookup(MemoryReceiptStore):
    """The deliveries consumer runs beside the observations consumer: while the ``n``-th
    look-up of announced calls is in the store, ``during`` (a delivery batch) runs."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.during: Any = None

    async def calls(self, ids: list[str]) -> dict[str, Doc]:
        self.n -= 1
        if self.n == 0 and self.during is not None:
            await self.during
        return await super().calls(ids)


def test_a_receipt_read_while_its_call_is_opened_is_offered_once_the_call_is_resolved() -> None:
    """Session s has call c pending whose announcement is not read yet (after a restart the
    deliveries are read ahead of the observations). B's receipt is read; while the tracker looks
    up the Session's calls, B's delivery is read and B opened — with nothing kept for it yet.
    The receipt was then offered to B before B's announced ids were filled in (no match) and
    kept, but a kept observation is offered only to calls opened later: B ended `uncertain`."""
    store, facts, clock = OpensDuringLookup(n=2), Facts(), Clock()
    t = tracker(store, facts, clock)
    handed = clock()

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "b"), handed - 1)])
        await t.open_call(delivery("s", "c"), handed - 2)  # c's announcement: not read yet
        store.during = t.open_call(delivery("s", "b"), handed)
        await t.observe_batch([(receipt("s", "b"), handed + 0.01)])
        clock.now = handed + WINDOW + 1
        t.read_up_to = clock()
        await t.fire_due(t.decidable(clock()))
        await t.drain()

    run(scenario())
    assert [f["state"] for f in facts.verdicts()["s/b"]] == ["applied"]


class RoundTrips(MemoryReceiptStore):
    """A store whose every call is a round trip: the event loop runs other tasks (the timer)
    while it is under way, as with the real store."""

    async def calls(self, ids: list[str]) -> dict[str, Doc]:
        await asyncio.sleep(0)
        return await super().calls(ids)

    async def claim(self, docs: list[Doc]) -> set[int]:
        await asyncio.sleep(0)
        return await super().claim(docs)


@pytest.mark.parametrize("batch", [1, 3])
def test_a_call_opened_after_its_deadline_takes_its_kept_receipt_before_the_timer_decides_it(
        batch: int) -> None:
    """The chaos row `kill -9 receipts` under load: the restarted tracker's observations consumer
    is assigned first and reads the backlog — the receipts of deliveries it has not read yet
    are kept — and moves ``read_up_to`` past their deadlines (the deadlines of the reloaded
    calls ask it to). Then the deliveries consumer, assigned later (the killed member's session
    timeout), reads the deliveries handed over just before and during the outage, some already
    past their deadline, and opens them in one batch. The timer ran while ``open_calls`` looked
    up the Sessions' calls and published the verdicts of the calls before it in the batch, and
    decided such a call ``uncertain`` ("no matching native receipt within 10 s") before the
    call was offered its kept receipt (seen in a chaos run: 54 calls opened in one batch 40 ms
    after the restart, one decided by the timer 300 ms later, between the others' `applied`)."""
    store, facts, clock = RoundTrips(), Facts(), Clock()
    t = tracker(store, facts, clock)
    handed = clock()
    cids = [f"c{i}" for i in range(batch)]

    async def scenario() -> None:
        timer = asyncio.create_task(t.run_timer())
        await t.observe_batch([(announced("s", c), handed - 1) for c in cids])
        await t.observe_batch([(receipt("s", c), handed + 0.01) for c in cids])  # kept
        assert len(t.early_order) == batch
        clock.now = handed + WINDOW + 0.5  # the deliveries are read past their deadline ...
        t.read_to(clock())  # ... the observations up to now
        await t.open_calls([(delivery("s", c), handed) for c in cids])
        await asyncio.sleep(0.05)  # the timer has its turn
        timer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await timer
        await t.drain()

    run(scenario())
    assert {k: [f["state"] for f in v] for k, v in facts.verdicts().items()} == {
        f"s/{c}": ["applied"] for c in cids}


class LookupFailsOnce(MemoryReceiptStore):
    """The store is away for one look-up of announced calls."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_lookup = False

    async def calls(self, ids: list[str]) -> dict[str, Doc]:
        if self.fail_lookup:
            self.fail_lookup = False
            raise ConnectionError("store away")
        return await super().calls(ids)


def test_a_delivery_batch_that_failed_while_offering_kept_receipts_offers_them_when_read_again(
        ) -> None:
    """The store is away while a delivery batch is offered the receipts kept for it: the batch
    fails and is read again. Its calls were tracked already, so reading it again skipped them
    and nothing offered them their kept receipts again: `uncertain` at the deadline."""
    store, facts, clock = LookupFailsOnce(), Facts(), Clock()
    t = tracker(store, facts, clock)
    handed = clock()

    async def scenario() -> None:
        await t.observe_batch([(announced("s", "a"), handed - 1)])
        await t.observe_batch([(receipt("s", "a"), handed + 0.01)])  # kept
        store.fail_lookup = True
        with pytest.raises(ConnectionError):
            await t.open_calls([(delivery("s", "a"), handed)])
        await t.open_calls([(delivery("s", "a"), handed)])  # the batch, read again
        clock.now = handed + WINDOW + 1
        t.read_to(clock())
        await t.fire_due(t.decidable(clock()))
        await t.drain()

    run(scenario())
    assert [f["state"] for f in facts.verdicts()["s/a"]] == ["applied"]
    assert store.pending_receipts == {}

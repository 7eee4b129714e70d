"""The receipt tracker's timer, on the in-memory store: deadlines pop once, only when due, only
up to what the observations are read to; a verdict batch whose publication fails is not lost
(the same verdicts go again)."""

from __future__ import annotations

import asyncio

import pytest

from services.receipts import verdicts
from services.receipts.tracker import Tracker
from services.receipts.verdicts import RETRY_S
from shared.domain.receipts import REASON_TIMEOUT, Expected, State
from tests.support.fakes.receipts import Clock, Facts, MemoryReceiptStore, tracker

# bounds wall time: `make test` runs it after the parallel run, alone (pyproject's `timing`)
pytestmark = pytest.mark.timing


def expected(cid: str) -> Expected:
    return Expected(harness="claude_code", session_id="s1", call_id=cid, name="f",
                    success=True, content=())


def test_expire_due_pops_only_the_calls_past_their_deadline() -> None:
    t = tracker(MemoryReceiptStore(), Facts(), Clock())
    t._track(expected("a"), 100.0)
    t._track(expected("b"), 200.0)
    out = t.expire_due(150.0)
    assert [k for k, _ in out] == [("s1", "a")]
    assert out[0][1].state is State.UNCERTAIN
    assert out[0][1].reason == REASON_TIMEOUT.format(window=10.0)
    assert t.expire_due(150.0) == []  # popped once
    assert [k for k, _ in t.expire_due(200.0)] == [("s1", "b")]


def test_a_deadline_waits_for_the_observations_read_up_to_it() -> None:
    clock = Clock(500.0)
    t = tracker(MemoryReceiptStore(), Facts(), clock)
    t._track(expected("a"), 100.0)
    t.read_up_to = 99.0  # the observations consumer has not read past 99 yet
    assert t.decidable(clock()) == 99.0
    assert t.expire_due(t.decidable(clock())) == []
    t.read_up_to = 120.0
    assert [k for k, _ in t.expire_due(t.decidable(clock()))] == [("s1", "a")]


def test_a_failed_verdict_batch_is_published_again() -> None:
    store, facts, clock = MemoryReceiptStore(), Facts(), Clock(101.0)
    t = tracker(store, facts, clock)
    t._track(expected("a"), 100.0)
    facts.fail = 1

    async def scenario() -> None:
        assert await t.fire_due(101.0) == 1
        assert facts.sent == [] and ("s1", "a") in t.calls  # kept, rescheduled
        assert t.expire_due(101.0) == []  # not before the retry delay
        clock.now = 101.0 + RETRY_S
        assert await t.fire_due(clock.now) == 1
        await t.drain()

    asyncio.run(scenario())
    [f] = facts.sent
    assert (f["call_id"], f["state"]) == ("a", "uncertain")
    assert store.receipt_verdicts.keys() == {"s1/a"}


class SlowSettle(MemoryReceiptStore):
    """A store whose deletes wait for ``gate``; every ``settle`` call is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.settles: list[list[str]] = []

    async def settle(self, ids: list[str]) -> None:
        self.settles.append(sorted(ids))
        await self.gate.wait()
        await super().settle(ids)


def test_settling_deletes_go_one_at_a_time_what_is_settled_meanwhile_together(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Settling deletes go one at a time: one background delete per verdict batch would queue
    dozens of deletes in the store ahead of the next batches' claims (a claim would wait up to
    2 s at 2 000 timeouts/s)."""
    monkeypatch.setattr(verdicts, "SETTLE_QUIET_S", 0.0)
    store, facts, clock = SlowSettle(), Facts(), Clock(200.0)
    t = tracker(store, facts, clock)
    for n, cid in enumerate("abc"):
        t._track(expected(cid), 100.0 + n)

    async def scenario() -> None:
        for n in range(3):  # three verdict batches while the first delete is under way
            assert await t.fire_due(100.0 + n) == 1
            await asyncio.sleep(0)
        assert store.settles == [["s1/a"]]
        store.gate.set()
        await t.drain()

    asyncio.run(scenario())
    assert store.settles == [["s1/a"], ["s1/b", "s1/c"]]
    assert len(facts.sent) == 3


def open_deletes_tracker(cids: str) -> tuple[SlowSettle, Facts, Tracker]:
    """A tracker whose store records every delete and lets it through, one call per letter of
    ``cids`` due at 100, 101, …"""
    store, facts = SlowSettle(), Facts()
    store.gate.set()
    t = tracker(store, facts, Clock(200.0))
    for n, cid in enumerate(cids):
        t._track(expected(cid), 100.0 + n)
    return store, facts, t


def test_settling_deletes_wait_while_verdicts_fall_due(monkeypatch: pytest.MonkeyPatch) -> None:
    """Deletes yield the store to the verdicts' own writes: none while verdict batches keep
    being fired, all once none was fired for SETTLE_QUIET_S."""
    monkeypatch.setattr(verdicts, "SETTLE_QUIET_S", 0.2)
    store, facts, t = open_deletes_tracker("abcd")

    async def scenario() -> None:
        for n in range(4):  # a verdict batch every 0.1 s: never quiet for 0.2 s
            assert await t.fire_due(100.0 + n) == 1
            await asyncio.sleep(0.1)
        assert store.settles == []
        await asyncio.sleep(0.25)
        assert store.settles == [["s1/a", "s1/b", "s1/c", "s1/d"]]

    asyncio.run(scenario())
    assert len(facts.sent) == 4 and store.pending_receipts == {}


def test_a_settle_backlog_or_a_drain_deletes_without_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verdicts, "SETTLE_QUIET_S", 3600.0)
    monkeypatch.setattr(verdicts, "SETTLE_BACKLOG", 2)
    store, _, t = open_deletes_tracker("abc")

    async def scenario() -> None:
        assert await t.fire_due(100.0) == 1
        await asyncio.sleep(0.05)
        assert store.settles == []  # one call waits: under the backlog
        assert await t.fire_due(101.0) == 1
        await asyncio.sleep(0.2)
        assert store.settles == [["s1/a", "s1/b"]]  # two: the backlog goes at once
        assert await t.fire_due(102.0) == 1
        await asyncio.sleep(0.05)
        assert store.settles == [["s1/a", "s1/b"]]
        await asyncio.wait_for(t.drain(), 1.0)  # a drain (stopping) does not wait
        assert store.settles == [["s1/a", "s1/b"], ["s1/c"]]

    asyncio.run(scenario())


class TimedSettle(MemoryReceiptStore):
    """A store whose every delete takes ``took`` seconds; records when each one began."""

    def __init__(self, took: float) -> None:
        super().__init__()
        self.took = took
        self.began: list[float] = []
        self.second = asyncio.Event()  # set when the second delete begins

    async def settle(self, ids: list[str]) -> None:
        self.began.append(asyncio.get_running_loop().time())
        if len(self.began) == 2:
            self.second.set()
        await asyncio.sleep(self.took)
        await super().settle(ids)


def test_settling_deletes_are_paced_and_a_drain_skips_the_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After each delete the next waits SETTLE_PACE times as long as it took, so the deletes
    leave most of the store's time to storage (docs/receipts.md); a drain does not wait."""
    monkeypatch.setattr(verdicts, "SETTLE_QUIET_S", 0.0)
    monkeypatch.setattr(verdicts, "SETTLE_MAX", 1)
    monkeypatch.setattr(verdicts, "SETTLE_PACE", 20.0)
    store, facts = TimedSettle(took=0.02), Facts()
    t = tracker(store, facts, Clock(200.0))
    for n, cid in enumerate("abcd"):
        t._track(expected(cid), 100.0 + n)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert await t.fire_due(103.0) == 4  # one verdict batch: four calls to settle
        await asyncio.wait_for(store.second.wait(), 3.0)
        gap = store.began[1] - store.began[0]
        assert gap >= 0.02 * 21 - 0.01, gap  # the delete, then 20× its time at rest
        started = loop.time()
        await asyncio.wait_for(t.drain(), 2.0)
        # the rest of the second delete cut short, and none between the last two (≥ 0.4 s each)
        assert loop.time() - started < 0.7  # paced on: ≥ 0.8 s

    asyncio.run(scenario())
    assert len(store.began) == 4 and store.pending_receipts == {}

"""Storage's decided-or-not state (``services/storage/decided.py``): which records are looked up
in the journal, when memory is trusted. The state machine drives it through random assignments,
revocations, lost commits, crashes, failed and good batches, and checks the crash-safety rule: a
record that may have been decided before — by the partition's previous owner, or by a batch that
failed half-way — is always looked up."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.storage.decided import DecidedState
from shared.domain.sessions import SessionState

BATCH_MAX = 4
PARTITIONS = ("a", "b")


def state(sid: str) -> SessionState:
    return SessionState(sid, "codex", "none", "2026-01-01T00:00:00Z")


def test_nothing_is_trusted_before_a_batch_is_decided() -> None:
    d = DecidedState(BATCH_MAX)
    assert d.needs_lookup("k", suspect=False)
    assert d.session("s") is None
    d.decided(["k"], {"s": state("s")})
    assert not d.needs_lookup("other", suspect=False)
    assert d.needs_lookup("k", suspect=False)  # decided lately: the same record twice in the log
    assert d.needs_lookup("other", suspect=True)
    assert d.session("s") == state("s")


def test_assignment_revocation_and_failure_forget_everything() -> None:
    for forget in (lambda d: d.assigned(["a"]), lambda d: d.revoked(["a"]),
                   lambda d: d.batch_failed([("a", 3)])):
        d = DecidedState(BATCH_MAX)
        d.decided(["k"], {"s": state("s")})
        forget(d)
        assert d.needs_lookup("other", suspect=False) and d.session("s") is None


def test_the_window_after_an_assignment_is_one_batch_from_the_first_record() -> None:
    d = DecidedState(BATCH_MAX)
    d.assigned(["a"])
    assert [d.arrived("a", o) for o in range(10, 16)] == [True] * BATCH_MAX + [False] * 2
    assert not d.arrived("b", 0)  # never assigned since this object was made: no window


def test_an_assignment_window_closes_when_its_first_record_was_not_journaled() -> None:
    """What a previous owner journaled past the committed offset is a prefix: the first record
    not journaled means none after it was, and nothing more is looked up; journaled, the whole
    window is. A failed batch's records are looked up whatever a probe said."""
    d = DecidedState(BATCH_MAX)
    d.assigned(["a", "b"])
    assert d.arrived("a", 10) and d.arrived("b", 20)
    assert d.unprobed == {"a", "b"}
    d.probed("a", journaled=False)
    d.probed("b", journaled=True)
    assert [d.arrived("a", o) for o in (11, 12)] == [False, False]
    assert [d.arrived("b", o) for o in (21, 22, 23, 24)] == [True, True, True, False]
    d.batch_failed([("a", 11), ("a", 12)])
    assert d.arrived("a", 11) and d.arrived("a", 12) and not d.arrived("a", 13)


def test_revocation_hands_over_the_written_offsets() -> None:
    d = DecidedState(BATCH_MAX)
    d.batch_done([("a", 3), ("a", 4), ("b", 9)])
    assert d.revoked(["a"]) == {"a": 5}
    assert d.revoked(["a"]) == {}  # committed once
    assert d.processed == {"b": 10}


def test_recent_keys_and_sessions_are_bounded() -> None:
    d = DecidedState(BATCH_MAX, cache_size=2)
    d.decided(["k1", "k2", "k3"], {f"s{i}": state(f"s{i}") for i in range(3)})
    assert list(d.recent) == ["k2", "k3"] and list(d.sessions) == ["s1", "s2"]


class Storage(RuleBasedStateMachine):
    """One storage replica (its ``DecidedState``, as the app drives it) and, between its
    ownerships, another writer of the same partitions. Each log record has its own source key;
    ``maybe_decided`` holds every key any writer may have journaled."""

    def __init__(self) -> None:
        super().__init__()
        self.d = DecidedState(BATCH_MAX)
        self.committed = dict.fromkeys(PARTITIONS, 0)
        self.position = dict.fromkeys(PARTITIONS, 0)
        self.owned: set[str] = set()
        self.maybe_decided: set[tuple[str, int]] = set()
        self.uncommitted = dict.fromkeys(PARTITIONS, False)  # one lost commit at most

    @rule(tp=st.sampled_from(PARTITIONS), others=st.integers(0, BATCH_MAX))
    def assign(self, tp: str, others: int) -> None:
        if tp in self.owned:
            return
        # the previous owner decided up to one batch past the committed offset, uncommitted
        start = self.committed[tp]
        self.maybe_decided |= {(tp, o) for o in range(start, start + others)}
        self.position[tp] = start
        self.owned.add(tp)
        self.d.assigned([tp])

    @rule(tp=st.sampled_from(PARTITIONS), commit_lost=st.booleans())
    def revoke(self, tp: str, commit_lost: bool) -> None:
        if tp not in self.owned:
            return
        done = self.d.revoked([tp])
        if tp in done and not (commit_lost and not self.uncommitted[tp]):  # one loss at most
            self.committed[tp] = done[tp]
            self.uncommitted[tp] = False
        self.owned.discard(tp)

    @rule()
    def crash(self) -> None:
        """kill -9: the replica starts again from nothing; its partitions come back by
        assignment."""
        self.d = DecidedState(BATCH_MAX)
        self.owned.clear()

    @precondition(lambda self: bool(self.owned))
    @rule(data=st.data())
    def batch(self, data: st.DataObject) -> None:
        positions: list[tuple[str, int]] = []
        room = BATCH_MAX
        for tp in sorted(self.owned):
            n = data.draw(st.integers(0, room))
            positions += [(tp, self.position[tp] + i) for i in range(n)]
            room -= n
        if not positions:
            return
        suspects = {p for p in positions if self.d.arrived(*p)}
        for tp in sorted({tp for tp, _ in positions} & self.d.unprobed):  # as the app probes
            first = min(p for p in positions if p[0] == tp)
            self.d.probed(tp, first in self.maybe_decided)
        suspects = {p for p in suspects if self.d.in_window(*p)}
        for p in positions:
            if p in self.maybe_decided:
                assert self.d.needs_lookup(f"{p}", p in suspects), (p, self.d.__dict__)
        outcome = data.draw(st.sampled_from(["done", "done_commit_lost", "failed"]))
        if outcome == "failed":
            # decided and journaled in part — a prefix of the batch (one ordered insert; a
            # record deciding nothing leaves a tombstone); redelivered. The rules assume a
            # writer is never more than one batch past the committed offset (docs/storage.md),
            # so not after a lost commit.
            prefix = positions[:data.draw(st.integers(0, len(positions)))]
            self.maybe_decided |= {(tp, o) for tp, o in prefix
                                   if o < self.committed[tp] + BATCH_MAX}
            self.d.batch_failed(positions)
            return
        self.maybe_decided |= set(positions)
        self.d.decided([f"{p}" for p in positions], {})
        self.d.batch_done(positions)
        for tp in {tp for tp, _ in positions}:
            self.position[tp] = max(o for t, o in positions if t == tp) + 1
            if outcome == "done_commit_lost" and not self.uncommitted[tp]:
                self.uncommitted[tp] = True  # the next commit carries it
            else:
                self.committed[tp] = self.position[tp]
                self.uncommitted[tp] = False

    @invariant()
    def a_commit_lags_one_batch_at_most(self) -> None:
        for tp in PARTITIONS:
            if tp in self.owned:
                assert self.position[tp] - self.committed[tp] <= BATCH_MAX


Storage.TestCase.settings = settings(max_examples=1000, stateful_step_count=50, deadline=None)
test_a_record_that_may_have_been_decided_is_always_looked_up = Storage.TestCase

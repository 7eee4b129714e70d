"""Storage's decided-or-not state (``services/storage/decided.py``): which records are looked up
in the journal, when memory is trusted. The state machine drives it through random assignments,
revocations, lost commits, crashes, failed and good batches, and checks the crash-safety rule: a
record that may have been decided before — by the partition's previous owner, or by a batch that
failed half-way — is always looked up."""

from __future__ import annotations

import copy
from dataclasses import replace

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.storage.decided import DecidedState
from services.storage.domain.sessions import SessionState
from tests.support.budget import examples

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
    d.probed("a", journaled=False, offset=10)
    d.probed("b", journaled=True, offset=20)
    assert [d.arrived("a", o) for o in (11, 12)] == [False, False]
    assert [d.arrived("b", o) for o in (21, 22, 23, 24)] == [True, True, True, False]
    assert d.unprobed == {"b"}  # journaled: the next batch's first record is probed too
    d.probed("b", journaled=True, offset=24)  # the previous owner got further still
    assert [d.arrived("b", o) for o in (25, 27, 28)] == [True, True, False]
    d.probed("b", journaled=False, offset=28)
    assert not d.unprobed and not d.arrived("b", 28)
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

    @rule(tp=st.sampled_from(PARTITIONS), others=st.integers(0, BATCH_MAX))
    def assign(self, tp: str, others: int) -> None:
        if tp in self.owned:
            return
        # the previous owner decided past the committed offset, uncommitted (its own batches
        # are in ``maybe_decided`` already; a replica gone before this model began, here)
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
        if tp in done and not commit_lost:
            self.committed[tp] = done[tp]
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
        for p in positions:  # as BatchWriter.write: arrivals, probes, then the window
            self.d.arrived(*p)
        for tp in sorted({tp for tp, _ in positions} & self.d.unprobed):
            first = min(p for p in positions if p[0] == tp)
            self.d.probed(tp, first in self.maybe_decided, first[1])
        suspects = {p for p in positions if self.d.in_window(*p)}
        for p in positions:
            if p in self.maybe_decided:
                assert self.d.needs_lookup(f"{p}", p in suspects), (p, self.d.__dict__)
        outcome = data.draw(st.sampled_from(["done", "done_commit_lost", "failed"]))
        if outcome == "failed":
            # decided and journaled in part — a prefix of the batch (one ordered insert; a
            # record deciding nothing leaves a tombstone); redelivered
            prefix = positions[:data.draw(st.integers(0, len(positions)))]
            self.maybe_decided |= set(prefix)
            self.d.batch_failed(positions)
            return
        self.maybe_decided |= set(positions)
        self.d.decided([f"{p}" for p in positions], {})
        self.d.batch_done(positions)
        for tp in {tp for tp, _ in positions}:
            self.position[tp] = max(o for t, o in positions if t == tp) + 1
            # a lost commit (the framework logs a failed commit and goes on fetching): any
            # number of batches in a row; the next commit that lands carries them all
            if outcome != "done_commit_lost":
                self.committed[tp] = self.position[tp]


Storage.TestCase.settings = settings(max_examples=examples(1000), stateful_step_count=50,
                                            deadline=None)
test_a_record_that_may_have_been_decided_is_always_looked_up = Storage.TestCase


# ---- shards' handover marks: when a Session document read from the store is current ----

def test_a_document_is_trusted_from_a_clean_mark_until_its_session_turns_suspect() -> None:
    d = DecidedState(BATCH_MAX)
    d.assigned(["a", "b"])
    assert d.marks_to_take(["a", "b"]) == {"a", "b"}
    d.marked("a", inherited_clean=True)
    d.marked("b", inherited_clean=False)
    assert d.marks_to_take(["a", "b"]) == set()  # read once per assignment
    assert d.trusts_document("x", "a") and not d.trusts_document("y", "b")
    d.batch_begins({"x": "a", "x2": "a"})
    d.batch_failed([("a", 1)])  # it may have written Items of x and x2, not their documents
    assert not d.trusts_document("x", "a") and d.trusts_document("z", "a")
    assert d.release({"a", "b"}) == set()  # a suspect left: a is not handed over clean
    d = DecidedState(BATCH_MAX)
    d.assigned(["a"])
    d.marked("a", inherited_clean=True)
    d.batch_begins({"x": "a"})
    d.attempt_failed()
    d.repaired(["x"])  # probed, brought up
    assert d.trusts_document("x", "a")
    # the failed batch's Items of x may never have been acked: the document is up, the broker
    # is not, until a batch's Items of x are acked up to x's last one
    assert not d.publishes_in_order("x", "a")
    d.decided([], {"x": replace(state("x"), last_sequence=3)})
    d.acked({"x": 2})  # a replay of its first Items: 3 may still be unacked
    assert not d.publishes_in_order("x", "a")
    d2 = copy.deepcopy(d)
    assert d2.release({"a"}) == set()  # handed over now, the successor must look too
    d.acked({"x": 3})
    assert d.publishes_in_order("x", "a")
    assert d.release({"a"}) == {"a"}  # only what it inherited clean goes back clean
    assert d.held == set() and not d.trusts_document("x", "a")
    d = DecidedState(BATCH_MAX)
    d.assigned(["a"])
    d.marked("a", inherited_clean=True)
    d.writes_dropped()  # documents it should have written never will be
    assert not d.trusts_document("x", "a") and d.release({"a"}) == set()


MARK_SESSIONS = {"x0": "s0", "x1": "s0", "y0": "s1", "y1": "s1"}  # Session → shard
MARK_SHARDS = ("s0", "s1")


class Handover(RuleBasedStateMachine):
    """Two storage replicas taking shards over from each other through the marks (as
    ``services/storage/batch.py`` drives ``DecidedState``), with clean and failed handovers,
    failed batches, ``kill -9`` and stops that leave the group before they release. Every batch
    reads its Session from the store (the worst case: nothing in memory). A replica's Session
    writer holds the states it has not written (``pending``); ``hidden`` Sessions have documents
    behind their Items that no live writer holds (a crash, a failed batch, dropped writes) until
    a probe brings them up. The rule checked: a replica trusts a document alone only when it does
    not lag unseen."""

    def __init__(self) -> None:
        super().__init__()
        self.marks: dict[str, tuple[str, str]] = {}  # shard → (state, holder)
        self.d = {r: DecidedState(BATCH_MAX) for r in "AB"}
        self.token = {r: f"{r}0" for r in "AB"}
        self.owned: dict[str, set[str]] = {r: set() for r in "AB"}
        self.pending: dict[str, set[str]] = {r: set() for r in "AB"}  # Sessions
        self.trusted = 0  # documents trusted alone: the rule was exercised
        self.stopping: set[str] = set()
        self.hidden: set[str] = set()  # Sessions

    def owner(self, s: str) -> str | None:
        return next((r for r in "AB" if s in self.owned[r]), None)

    def release(self, r: str, shards: set[str]) -> None:
        for s in self.d[r].release(shards):
            if self.marks.get(s, ("", ""))[1] == self.token[r]:
                self.marks[s] = ("clean", self.token[r])

    def drop(self, r: str) -> None:
        self.hidden |= self.pending[r]
        self.pending[r] = set()

    @rule(r=st.sampled_from("AB"), s=st.sampled_from(MARK_SHARDS))
    def assign(self, r: str, s: str) -> None:
        if self.owner(s) is None and r not in self.stopping:
            self.owned[r].add(s)
            self.d[r].assigned([s])

    @rule(r=st.sampled_from("AB"), sid=st.sampled_from(sorted(MARK_SESSIONS)),
          outcome=st.sampled_from(["done", "failed"]))
    def batch(self, r: str, sid: str, outcome: str) -> None:
        s = MARK_SESSIONS[sid]
        if s not in self.owned[r]:
            return
        for t in self.d[r].marks_to_take([s]):  # Handovers.take
            state = self.marks.get(t, ("clean", ""))[0]  # no mark: clean (a genesis store)
            self.marks[t] = ("held", self.token[r])
            self.d[r].marked(t, state == "clean")
        self.d[r].batch_begins({sid: s})
        if self.d[r].trusts_document(sid, s):
            self.trusted += 1
            assert sid not in self.hidden, (r, sid)
            assert not any(sid in self.pending[o] for o in "AB" if o != r), (r, sid)
        elif not any(sid in self.pending[o] for o in "AB" if o != r):
            self.hidden.discard(sid)  # the probe brought the document up (roll_forward)
            self.d[r].repaired([sid])
        if outcome == "failed":  # Items may be written, the document not
            self.hidden.add(sid)
            self.d[r].batch_failed([(s, 0)])
        else:
            self.pending[r].add(sid)

    @rule(r=st.sampled_from("AB"), drained=st.booleans())
    def revoke(self, r: str, drained: bool) -> None:
        """A rebalance (eager: every partition): the writer drains, or gives up and drops."""
        if r in self.stopping or not self.owned[r]:
            return
        if not drained and self.pending[r]:
            self.drop(r)
            self.d[r].writes_dropped()
        self.pending[r] = set()
        self.release(r, set(self.owned[r]))
        self.d[r].revoked(list(self.owned[r]))
        self.owned[r] = set()

    @rule(r=st.sampled_from("AB"))
    def leave(self, r: str) -> None:
        """A stop: the group is left at once (no revocation); the rest comes later."""
        if r not in self.stopping:
            self.stopping.add(r)
            self.owned[r] = set()

    @rule(r=st.sampled_from("AB"), drained=st.booleans())
    def finish_stop(self, r: str, drained: bool) -> None:
        if r not in self.stopping:
            return
        if not drained and self.pending[r]:
            self.drop(r)
            self.d[r].writes_dropped()
        self.pending[r] = set()
        self.release(r, set(self.d[r].held))
        self.restart(r)

    @rule(r=st.sampled_from("AB"))
    def crash(self, r: str) -> None:
        self.drop(r)
        self.restart(r)

    def restart(self, r: str) -> None:
        self.stopping.discard(r)
        self.owned[r] = set()
        self.pending[r] = set()
        self.d[r] = DecidedState(BATCH_MAX)
        self.token[r] = f"{r}{int(self.token[r][1:]) + 1}"

    @invariant()
    def a_clean_mark_means_current_documents(self) -> None:
        for s, (state, _holder) in self.marks.items():
            if state == "clean":
                shard_sessions = {sid for sid, t in MARK_SESSIONS.items() if t == s}
                assert not shard_sessions & self.hidden, (s, self.hidden)
                assert not any(shard_sessions & self.pending[r] for r in "AB"
                               if self.owner(s) != r)


Handover.TestCase.settings = settings(max_examples=examples(1000), stateful_step_count=50,
                                             deadline=None)
test_a_document_trusted_alone_never_lags_unseen = Handover.TestCase


def test_the_handover_machine_trusts_documents_at_all() -> None:
    """Not vacuous: a replica taking a genesis shard trusts its documents."""
    m = Handover()
    m.assign("A", "s0")
    m.batch("A", "x0", "done")
    assert m.trusted == 1

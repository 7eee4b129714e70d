"""The Session writer (services/storage/sessionwriter.py): Session documents written behind the
batch never move back, the newest state wins, a failed write loses nothing, a drain waits for
everything handed over. The store here is a dict behind an async write (a unit test of one
object); the real store's side is tests/integration/test_storage.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from services.storage import sessionwriter
from services.storage.sessionwriter import SessionWriter

# bounds wall time: `make test` runs it after the parallel run, alone (pyproject's `timing`)
pytestmark = pytest.mark.timing

Doc = dict[str, Any]


def st(sid: str, version: int) -> Doc:
    return {"_id": sid, "harness": "codex", "placement": "default", "created_at": "t",
            "version": version, "last_sequence": version}


class Store:
    def __init__(self, delay: float = 0.0) -> None:
        self.docs: dict[str, int] = {}
        self.writes: list[dict[str, int]] = []
        self.delay = delay
        self.fail = 0  # the next ``fail`` writes raise

    async def write(self, states: dict[str, Doc]) -> None:
        await asyncio.sleep(self.delay)
        if self.fail:
            self.fail -= 1
            raise ConnectionError("the store is away")
        self.writes.append({k: v["version"] for k, v in states.items()})
        for sid, s in states.items():
            self.docs[sid] = s["version"]


async def test_the_newest_state_of_each_session_is_written_once() -> None:
    store = Store()
    w = SessionWriter(store.write)
    w.defer({"a": st("a", 2), "b": st("b", 1)})
    w.defer({"a": st("a", 3)})
    w.defer({"a": st("a", 1)})  # older than what is held: ignored
    w.start()
    await w.drain(5)
    assert store.docs == {"a": 3, "b": 1}
    assert store.writes == [{"a": 3, "b": 1}]
    assert not w.dirty
    await w.stop()


async def test_the_replica_reads_its_unwritten_state() -> None:
    w = SessionWriter(Store().write)
    w.defer({"a": st("a", 4)})
    held = w.state("a")
    assert held is not None and held.version == 4
    assert w.state("b") is None


async def test_a_write_now_waits_for_the_write_in_flight_so_a_document_never_moves_back(
) -> None:
    store = Store(delay=0.05)
    w = SessionWriter(store.write)
    w.defer({"a": st("a", 5)})
    w.start()
    await asyncio.sleep(0.01)  # the round writing v5 is in flight
    await w.write_now({"a": st("a", 6)})
    await w.drain(5)
    assert store.writes == [{"a": 5}, {"a": 6}]
    assert store.docs == {"a": 6}
    await w.stop()


async def test_a_write_now_supersedes_an_older_unwritten_state_but_not_a_newer_one() -> None:
    store = Store()
    w = SessionWriter(store.write)
    w.defer({"a": st("a", 2), "b": st("b", 9)})
    await w.write_now({"a": st("a", 3), "b": st("b", 8)})
    assert "a" not in w.dirty  # v3 written: v2 is older
    assert w.dirty["b"]["version"] == 9  # still to write: newer than what went now
    await w.drain(5)  # not started: one round inline
    assert store.docs == {"a": 3, "b": 9}


async def test_a_failed_write_keeps_the_states_and_a_newer_one_handed_meanwhile_wins(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessionwriter, "RETRY_S", 0.01)
    store = Store(delay=0.02)
    store.fail = 2
    w = SessionWriter(store.write)
    w.defer({"a": st("a", 1), "b": st("b", 1)})
    w.start()
    await asyncio.sleep(0.01)
    w.defer({"a": st("a", 2)})  # while the first (failing) round is in flight
    await w.drain(5)
    assert store.docs == {"a": 2, "b": 1}
    await w.stop()


async def test_a_drain_that_cannot_finish_times_out_and_drop_forgets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessionwriter, "RETRY_S", 0.01)
    store = Store()
    store.fail = 10_000
    w = SessionWriter(store.write)
    w.defer({"a": st("a", 1)})
    w.start()
    with pytest.raises(TimeoutError):
        await w.drain(0.1)
    w.drop()
    assert not w.dirty
    await w.drain(0.1)  # nothing left to wait for
    await w.stop(drain_s=0.1)
    assert store.docs == {}


async def test_while_sessions_keep_falling_dirty_the_writer_rests_between_rounds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # PACE × a 20 ms round = 20 s of rest: the second round must not come while we look
    monkeypatch.setattr(sessionwriter, "PACE", 1000.0)
    store = Store(delay=0.02)
    w = SessionWriter(store.write)
    w.defer({"a": st("a", 1)})
    w.start()
    await asyncio.sleep(0.005)  # round 1 (a) in flight
    w.defer({"b": st("b", 1)})  # dirty again before it ends: the writer rests
    await asyncio.sleep(0.3)
    assert store.writes == [{"a": 1}]
    assert "b" in w.dirty
    w.defer({"b": st("b", 2)})  # decided again while it rests: written once, newest
    await w.drain(2)  # a drain does not rest
    assert store.writes == [{"a": 1}, {"b": 2}]
    await w.stop()


async def test_without_a_backlog_the_writer_does_not_rest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessionwriter, "PACE", 1000.0)
    store = Store(delay=0.02)
    w = SessionWriter(store.write)
    w.start()
    w.defer({"a": st("a", 1)})
    await asyncio.sleep(0.1)  # written, nothing dirty after it: idle, no rest pending
    w.defer({"a": st("a", 2)})
    await asyncio.sleep(0.1)
    assert store.writes == [{"a": 1}, {"a": 2}]
    await w.stop()


def seq(sid: str, version: int, last_sequence: int) -> Doc:
    return {**st(sid, version), "last_sequence": last_sequence}


def held_writer(store: Store, monkeypatch: pytest.MonkeyPatch) -> SessionWriter:
    """A started writer that storage told it is behind (a batch of ``BEHIND_BATCH``), held
    back for longer than the test looks."""
    monkeypatch.setattr(sessionwriter, "HOLD_S", 60.0)
    w = SessionWriter(store.write)
    w.start()
    w.took_batch(sessionwriter.BEHIND_BATCH)
    return w


async def test_not_held_back_a_session_is_written_as_soon_as_it_falls_dirty() -> None:
    store = Store()
    w = SessionWriter(store.write)
    w.start()
    w.took_batch(sessionwriter.BEHIND_BATCH - 1)  # a batch that kept up: not behind
    w.defer({"a": st("a", 1)})
    await asyncio.sleep(0.05)
    assert store.writes == [{"a": 1}] and not w.dirty
    await w.stop()


async def test_held_back_after_a_big_batch_then_everything_written_when_the_hold_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessionwriter, "HOLD_S", 0.4)
    store = Store()
    w = SessionWriter(store.write)
    w.start()
    w.took_batch(sessionwriter.BEHIND_BATCH)
    w.defer({"a": st("a", 1), "b": st("b", 1)})
    await asyncio.sleep(0.1)
    w.defer({"a": st("a", 2)})  # decided again while held: written once, newest
    await asyncio.sleep(0.1)
    assert store.writes == [] and set(w.dirty) == {"a", "b"}
    await asyncio.sleep(0.4)  # the hold ended (0.4 s after the batch)
    assert store.writes == [{"a": 2, "b": 1}] and not w.dirty
    await w.stop()


async def test_another_big_batch_extends_the_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessionwriter, "HOLD_S", 0.5)
    store = Store()
    w = SessionWriter(store.write)
    w.start()
    w.took_batch(sessionwriter.BEHIND_BATCH)
    w.defer({"a": st("a", 1)})
    await asyncio.sleep(0.3)
    w.took_batch(sessionwriter.BEHIND_BATCH + 100)  # still behind: held until 0.8 s
    await asyncio.sleep(0.25)  # past the first hold's end
    assert store.writes == []
    await asyncio.sleep(0.5)
    assert store.writes == [{"a": 1}]
    await w.stop()


async def test_held_back_a_session_is_written_once_it_is_lag_items_behind_in_its_newest_state(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not as soon as it falls dirty: every decision until it is due replaces the state to
    write, so a Session decided many times while storage is behind is written once."""
    store = Store()
    w = held_writer(store, monkeypatch)
    first = 40
    for n in range(sessionwriter.LAG_ITEMS - 1):  # Items first..first+LAG_ITEMS-2: not due
        w.defer({"a": seq("a", n + 1, first + n)})
        await asyncio.sleep(0.005)
    assert store.writes == [] and w.dirty["a"]["version"] == sessionwriter.LAG_ITEMS - 1
    w.defer({"a": seq("a", sessionwriter.LAG_ITEMS, first + sessionwriter.LAG_ITEMS - 1)})
    await asyncio.sleep(0.05)
    assert store.writes == [{"a": sessionwriter.LAG_ITEMS}] and not w.dirty
    await w.stop()


async def test_held_back_a_session_dirty_for_lag_s_is_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessionwriter, "LAG_S", 0.4)
    store = Store()
    w = held_writer(store, monkeypatch)
    w.defer({"a": st("a", 1)})
    await asyncio.sleep(0.2)
    w.defer({"b": st("b", 1), "a": st("a", 2)})  # a stays as old as it fell dirty
    await asyncio.sleep(0.1)
    assert store.writes == []
    await asyncio.sleep(0.2)  # a: 0.5 s dirty, b: 0.3 s
    assert store.writes == [{"a": 2}] and set(w.dirty) == {"b"}
    await asyncio.sleep(0.3)
    assert store.writes == [{"a": 2}, {"b": 1}] and not w.dirty
    await w.stop()


async def test_held_back_beyond_dirty_max_the_oldest_are_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessionwriter, "DIRTY_MAX", 3)
    store = Store()
    w = held_writer(store, monkeypatch)
    for sid in "abcde":
        w.defer({sid: st(sid, 1)})
    await asyncio.sleep(0.05)
    assert [sid for write in store.writes for sid in write] == ["a", "b", "c", "d", "e"][:2]
    assert set(w.dirty) == {"c", "d", "e"}
    await w.stop()


async def test_held_back_a_drain_writes_what_is_not_due_yet(
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store()
    w = held_writer(store, monkeypatch)
    w.defer({"a": st("a", 1), "b": st("b", 3)})
    await asyncio.sleep(0.05)
    assert store.writes == []  # not due (LAG_S, LAG_ITEMS)
    await w.drain(2)
    assert store.docs == {"a": 1, "b": 3} and not w.dirty
    await w.stop()


async def test_a_round_chosen_before_a_write_now_took_the_lock_never_writes_the_older_state(
) -> None:
    """The writer picks its round's states, then waits for the lock; a ``write_now`` of a newer
    state of the same Session that was waiting first writes it meanwhile. The round must not
    write the older state over it (a binding, written now because no Item carries it, would
    vanish from the document)."""
    store = Store(delay=0.05)
    w = SessionWriter(store.write)
    first = asyncio.create_task(w.write_now({"b": st("b", 1)}))  # holds the lock
    await asyncio.sleep(0.01)
    w.defer({"a": st("a", 1)})
    newer = asyncio.create_task(w.write_now({"a": st("a", 2)}))  # waits for the lock first
    await asyncio.sleep(0.01)
    w.start()  # its round picks a's state 1 and waits for the lock behind the write_now
    await asyncio.gather(first, newer)
    await w.drain(2)
    assert store.docs == {"a": 2, "b": 1}
    assert {"a": 1} not in store.writes
    await w.stop()

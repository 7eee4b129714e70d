"""The deadline queue: one timer structure for every pending call
(services/receipts/domain/deadlines.py)."""

from __future__ import annotations

import random
import time
import tracemalloc

from hypothesis import given
from hypothesis import strategies as st

from services.receipts.domain.deadlines import DeadlineQueue
from shared.domain.receipts import CallRecord, expect


def test_pop_due_in_deadline_order() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    for key, d in [("c", 3.0), ("a", 1.0), ("b", 2.0), ("d", 4.0)]:
        q.add(key, d)
    assert q.next_deadline() == 1.0
    assert q.pop_due(0.5) == []
    assert q.pop_due(2.0) == ["a", "b"]  # deadline == now is due
    assert q.next_deadline() == 3.0
    assert len(q) == 2
    assert q.pop_due(10) == ["c", "d"]
    assert q.next_deadline() is None and len(q) == 0


def test_equal_deadlines_fifo() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    for k in "xyz":
        q.add(k, 5.0)
    assert q.pop_due(5.0) == ["x", "y", "z"]


def test_cancel() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    q.add("a", 1.0)
    q.add("b", 2.0)
    assert q.cancel("a") is True
    assert q.cancel("a") is False
    assert q.cancel("zzz") is False
    assert "a" not in q and "b" in q
    assert q.next_deadline() == 2.0  # the stale head is skipped
    assert q.pop_due(10) == ["b"]


def test_readd_reschedules() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    q.add("a", 1.0)
    q.add("a", 5.0)
    assert len(q) == 1
    assert q.deadline_of("a") == 5.0
    assert q.pop_due(2.0) == []
    assert q.pop_due(5.0) == ["a"]
    assert q.pop_due(100) == []


def test_pop_due_limit() -> None:
    q: DeadlineQueue[int] = DeadlineQueue()
    for k in range(10):
        q.add(k, float(k))
    assert q.pop_due(100, limit=3) == [0, 1, 2]
    assert len(q) == 7


def test_heap_compacts_after_many_cancels() -> None:
    q: DeadlineQueue[int] = DeadlineQueue()
    for k in range(10_000):
        q.add(k, float(k))
    for k in range(9_900):
        q.cancel(k)
    assert len(q) == 100
    assert len(q._heap) <= 2 * 100 + 64 + 1
    assert q.pop_due(1e9) == list(range(9_900, 10_000))


def test_ten_thousand_pending_fire_in_order_and_fast() -> None:
    rng = random.Random(7)
    q: DeadlineQueue[str] = DeadlineQueue()
    deadlines = {f"call_{k}": rng.uniform(0, 10) for k in range(10_000)}
    cancelled = set(rng.sample(sorted(deadlines), 1_000))
    start = time.perf_counter()
    for key, d in deadlines.items():
        q.add(key, d)
    for key in cancelled:
        q.cancel(key)
    fired: list[str] = []
    now = 0.0
    while q.next_deadline() is not None:
        now += 0.01  # a 10 ms tick
        fired += q.pop_due(now)
    elapsed = time.perf_counter() - start
    live = {k: d for k, d in deadlines.items() if k not in cancelled}
    assert sorted(fired) == sorted(live)
    assert [live[k] for k in fired] == sorted(live[k] for k in fired)
    assert elapsed < 2.0  # about 30 ms here; generous for a shared machine


def test_memory_per_pending_call_under_2kb() -> None:
    """Tracker record + Expected + a small delivered content + timer entry, 10 000 calls."""
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    q: DeadlineQueue[str] = DeadlineQueue()
    records: dict[str, CallRecord] = {}
    for k in range(10_000):
        key = f"session_{k:032x}/call_{k:032x}"
        rec = CallRecord(
            expect(
                harness="codex",
                session_id=f"session_{k:032x}",
                call_id=f"call_{k:032x}",
                name="lookup",
                success=True,
                content=[{"type": "input_text", "text": f"result {k}"}],
                thread_id=f"thr_{k:032x}",
                turn_id=f"turn_{k:032x}",
            )
        )
        deadline = rec.handed_over(1_700_000_000.0 + k / 1000)
        assert deadline is not None
        records[key] = rec
        q.add(key, deadline)
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    per_call = (used - base) / 10_000
    print(f"memory per pending call: {per_call:.0f} bytes")
    assert per_call <= 2048


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "cancel", "pop"]),
            st.integers(0, 20),
            st.floats(0, 100, allow_nan=False),
        ),
        max_size=80,
    )
)
def test_matches_a_naive_model(ops: list[tuple[str, int, float]]) -> None:
    q: DeadlineQueue[int] = DeadlineQueue()
    model: dict[int, float] = {}
    for op, key, value in ops:
        if op == "add":
            q.add(key, value)
            model[key] = value
        elif op == "cancel":
            assert q.cancel(key) is (model.pop(key, None) is not None)
        else:
            due = q.pop_due(value)
            expected = [k for k, d in model.items() if d <= value]
            assert sorted(due) == sorted(expected)
            assert [model[k] for k in due] == sorted(model[k] for k in due)
            for k in due:
                del model[k]
        assert len(q) == len(model)
        assert q.next_deadline() == (min(model.values()) if model else None)


def test_due_says_whether_a_live_deadline_passed() -> None:
    q: DeadlineQueue[str] = DeadlineQueue()
    assert not q.due(100.0)
    q.add("a", 10.0)
    q.add("b", 20.0)
    assert not q.due(9.99)
    assert q.due(10.0)
    q.cancel("a")  # a cancelled entry never counts
    assert not q.due(15.0)
    assert q.due(20.0)

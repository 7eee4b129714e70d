"""The monotonic application state machine (shared/domain/receipts.py ``CallRecord``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.domain.receipts import (
    CONFIRMED,
    REASON_RELEASED,
    RECEIPT_WINDOW_S,
    RELEASED,
    CallRecord,
    Log,
    NotAMatch,
    Publish,
    State,
    expect,
)

T0 = 1_700_000_000.0


def record() -> CallRecord:
    return CallRecord(
        expect(
            harness="codex",
            session_id="session_1",
            call_id="call_1",
            name="f",
            success=True,
            content=[{"type": "input_text", "text": "x"}],
            thread_id="th",
            turn_id="tu",
        )
    )


def delivered() -> CallRecord:
    r = record()
    assert r.handed_over(T0) == T0 + RECEIPT_WINDOW_S
    return r


def test_window_is_ten_seconds() -> None:
    assert RECEIPT_WINDOW_S == 10.0


def test_confirmation_at_9s_applies() -> None:
    r = delivered()
    step = r.observe(CONFIRMED, T0 + 9)
    assert step == Publish("call_1", State.APPLIED, step.reason)  # type: ignore[union-attr]
    assert r.state is State.APPLIED


def test_confirmation_exactly_at_deadline_applies() -> None:
    r = delivered()
    step = r.observe(CONFIRMED, T0 + 10)
    assert isinstance(step, Publish) and step.state is State.APPLIED


def test_no_receipt_uncertain_at_10s_not_before() -> None:
    r = delivered()
    assert r.expire(T0 + 9.999) is None
    assert r.state is State.PENDING
    step = r.expire(T0 + 10)
    assert isinstance(step, Publish) and step.state is State.UNCERTAIN
    assert "10 s" in step.reason


def test_release_at_2s_uncertain_and_later_confirmation_logged() -> None:
    r = delivered()
    step = r.observe(RELEASED, T0 + 2)
    assert isinstance(step, Publish) and step.state is State.UNCERTAIN
    assert step.reason == REASON_RELEASED
    assert r.observe(CONFIRMED, T0 + 3) == Log(
        "call_1", "confirmation_after_release", State.UNCERTAIN
    )
    assert r.state is State.UNCERTAIN
    assert r.expire(T0 + 10) is None


def test_confirmation_after_window_stays_uncertain() -> None:
    r = delivered()
    assert isinstance(r.expire(T0 + 10.01), Publish)
    step = r.observe(CONFIRMED, T0 + 11)
    assert step == Log("call_1", "confirmation_after_window", State.UNCERTAIN)
    assert r.state is State.UNCERTAIN


def test_confirmation_past_deadline_before_timer_fired_is_uncertain() -> None:
    r = delivered()
    step = r.observe(CONFIRMED, T0 + 10.5)
    assert isinstance(step, Publish) and step.state is State.UNCERTAIN
    assert "after the 10 s window" in step.reason
    assert r.expire(T0 + 11) is None


def test_refusal_fails_and_is_final() -> None:
    r = delivered()
    step = r.refused("function_result_images_unsupported: …")
    assert isinstance(step, Publish) and step.state is State.FAILED
    assert "function_result_images_unsupported" in step.reason
    assert r.observe(CONFIRMED, T0 + 1) == Log(
        "call_1", "confirmation_after_terminal", State.FAILED
    )
    assert r.expire(T0 + 100) is None
    assert r.refused("again") == Log("call_1", "refusal_after_terminal", State.FAILED)
    assert r.state is State.FAILED


def test_not_a_match_changes_nothing() -> None:
    r = delivered()
    assert r.observe(NotAMatch("item.id", "x"), T0 + 1) is None
    assert r.state is State.PENDING


def test_redelivery_never_extends_the_window() -> None:
    r = delivered()
    assert r.handed_over(T0 + 5) is None
    assert r.deadline == T0 + 10


def test_no_deadline_before_handover() -> None:
    r = record()
    assert r.expire(T0 + 1000) is None
    assert r.state is State.PENDING


def test_confirmation_before_handover_fact_applies() -> None:
    # The runtime's observation can overtake the dispatcher's hand-over fact.
    r = record()
    step = r.observe(CONFIRMED, T0)
    assert isinstance(step, Publish) and step.state is State.APPLIED
    assert r.handed_over(T0) is None


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(["confirm", "release", "nomatch", "refuse", "expire", "handover"]),
        st.floats(min_value=0, max_value=30, allow_nan=False),
    ),
    max_size=12,
)


@given(EVENTS)
def test_monotonic_and_published_once(events: list[tuple[str, float]]) -> None:
    r = record()
    published: list[Publish] = []
    first_terminal: Any = None
    for kind, dt in sorted(events, key=lambda e: e[1]):
        now = T0 + dt
        if kind == "confirm":
            step = r.observe(CONFIRMED, now)
        elif kind == "release":
            step = r.observe(RELEASED, now)
        elif kind == "nomatch":
            step = r.observe(NotAMatch("x", "x"), now)
        elif kind == "refuse":
            step = r.refused("no")
        elif kind == "expire":
            step = r.expire(now)
        else:
            r.handed_over(now)
            step = None
        if isinstance(step, Publish):
            published.append(step)
        if first_terminal is None and r.state is not State.PENDING:
            first_terminal = r.state
        if first_terminal is not None:
            assert r.state is first_terminal
    assert len(published) <= 1
    if published:
        assert published[0].state is r.state
    else:
        assert r.state is State.PENDING


@pytest.mark.parametrize("late", [0.001, 1.0, 60.0])
def test_late_reason_reports_lateness(late: float) -> None:
    r = delivered()
    step = r.observe(CONFIRMED, T0 + 10 + late)
    assert isinstance(step, Publish) and f"{late:.3f}" in step.reason

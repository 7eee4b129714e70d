"""The Session state machine storage applies (services/storage/domain/sessions.py): `delivery`
values, Turn Items, gap-free sequences, function results stored with both public fields."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.storage.domain.sessions import (
    SessionState,
    decide_create,
    decide_fact,
    decide_message,
    decide_tool_result,
)

NOW = "2026-01-01T00:00:00.000Z"
MSG = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]


def admitted(n: int, **extra: Any) -> dict[str, Any]:
    return {"request_id": f"req_{n}", "event_id": f"evt_{n}", "session_id": "session_1",
            "fingerprint": f"fp{n}", "messages": MSG, **extra}


def created() -> SessionState:
    d = decide_create(admitted(0, harness="codex", placement="none"), NOW)
    assert d.state is not None
    return d.state


def test_create_starts_a_turn() -> None:
    d = decide_create(admitted(0, harness="codex", placement="none"), NOW)
    assert [(i["sequence"], i["type"]) for i in d.items] == [(1, "message"), (2, "turn")]
    assert d.items[1]["state"] == "started"
    assert d.state is not None and d.state.turn_running
    assert d.to_deliver is not None and d.to_deliver["kind"] == "start"
    assert d.reply is not None and d.reply["status"] == 201


def test_message_joining_a_running_turn_is_steered() -> None:
    s = created()
    d = decide_message(s, admitted(1), NOW)
    assert d.reply is not None and d.reply["body"]["delivery"] == "steered"
    assert d.to_deliver is not None and d.to_deliver["kind"] == "steer"
    assert d.to_deliver["turn_id"] == s.turn_id
    assert [i["sequence"] for i in d.items] == [3]


def test_message_after_the_turn_ended_starts_a_new_one() -> None:
    s = created()
    end = decide_fact(s, {"fact_id": "f1", "kind": "turn", "turn_id": s.turn_id,
                          "state": "completed"}, NOW)
    assert end.state is not None and not end.state.turn_running
    assert [(i["type"], i["state"]) for i in end.items] == [("turn", "completed")]
    d = decide_message(end.state, admitted(1), NOW)
    assert d.reply is not None and d.reply["body"]["delivery"] == "started"
    assert d.to_deliver is not None and d.to_deliver["turn_id"] != s.turn_id
    assert [i["sequence"] for i in d.items] == [4, 5]  # message, turn started: no gap


def test_function_result_resumes_and_public_item_has_both_fields() -> None:
    s = created()
    call = decide_fact(s, {"fact_id": "c", "kind": "function_call", "call_id": "c1",
                           "name": "f", "arguments": {}}, NOW)
    assert call.state is not None and call.state.open_calls == {"c1": "f"}
    d = decide_tool_result(call.state, admitted(2, call_id="c1", fields_present=["output"],
                                                submission_fingerprint="s",
                                                submission={"call_id": "c1", "success": True,
                                                            "output": "ok"}), NOW)
    assert d.reply is not None and d.reply["body"]["delivery"] == "resumed"
    [item] = d.items
    assert item["output"] == "ok" and "error" in item and item["error"] is None
    assert d.state is not None and d.state.open_calls == {}
    assert d.to_deliver is not None and d.to_deliver["name"] == "f"


def test_turn_end_for_an_inactive_turn_changes_nothing() -> None:
    s = created()
    d = decide_fact(s, {"fact_id": "x", "kind": "turn", "turn_id": "turn_other",
                        "state": "failed"}, NOW)
    assert d.items == [] and d.state is None


def call_fact(call_id: str, turn_id: str | None) -> dict[str, Any]:
    return {"fact_id": f"obs:{call_id}", "kind": "function_call", "call_id": call_id,
            "name": "f", "arguments": {}, "turn_id": turn_id}


def test_a_call_printed_in_a_turn_core_has_ended_opens_nothing() -> None:
    """The dispatcher failed the Turn (and sent the Runtime an interrupt); the harness printed
    a call before the interrupt reached it. No public call on the ended Turn, none on a later
    Turn either: nobody may answer it through Core."""
    s = created()
    failed = decide_fact(s, {"fact_id": "f1", "kind": "turn", "turn_id": s.turn_id,
                             "state": "failed", "reason": "image steer"}, NOW)
    assert failed.state is not None and not failed.state.turn_running
    late = decide_fact(failed.state, call_fact("c1", s.turn_id), NOW)
    assert late.items == [] and late.state is None and late.call_updates == []
    later = decide_message(failed.state, admitted(1), NOW)
    assert later.state is not None and later.state.turn_running
    assert later.state.turn_id != s.turn_id
    on_next = decide_fact(later.state, call_fact("c2", s.turn_id), NOW)
    assert on_next.items == [] and on_next.state is None


def test_a_call_in_the_running_turn_opens_on_it() -> None:
    s = created()
    for turn_id in (s.turn_id, None):  # tagged with the running Turn, or untagged
        d = decide_fact(s, call_fact("c1", turn_id), NOW)
        assert [(i["type"], i["turn_id"]) for i in d.items] == [("function_call", s.turn_id)]
        assert d.state is not None and d.state.open_calls == {"c1": "f"}


def test_decisions_are_deterministic() -> None:
    a = decide_create(admitted(0, harness="codex", placement="none"), NOW)
    b = decide_create(admitted(0, harness="codex", placement="none"), NOW)
    assert [i["id"] for i in a.items] == [i["id"] for i in b.items]


# ---- SessionState.evolve: dataclasses.replace, faster ------------------------------------

_STATE_CHANGES = {
    "version": st.integers(0, 10**6),
    "last_sequence": st.integers(0, 10**9),
    "turn_id": st.none() | st.text(max_size=12),
    "turn_running": st.booleans(),
    "status": st.sampled_from(["waiting_for_runtime", "ready", "closed"]),
    "binding": st.none() | st.fixed_dictionaries({"runtime_id": st.text(max_size=8)}),
    "open_calls": st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
    "tenant": st.text(min_size=1, max_size=8),
}


@given(st.fixed_dictionaries({}, optional=_STATE_CHANGES))
def test_evolve_is_dataclasses_replace(changes: dict[str, Any]) -> None:
    state = SessionState(session_id="s1", harness="codex", placement="p",
                         created_at="2026-01-01T00:00:00.000Z", version=3, last_sequence=7,
                         open_calls={"c1": "f"})
    before = dict(vars(state))
    got = state.evolve(**changes)
    want = dataclasses.replace(state, **changes)
    assert got == want and vars(got) == vars(want)
    assert got is not state and vars(state) == before  # the original unchanged
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.version = 1  # type: ignore[misc]


def test_evolve_refuses_an_unknown_field() -> None:
    state = SessionState(session_id="s1", harness="codex", placement="p",
                         created_at="2026-01-01T00:00:00.000Z")
    with pytest.raises(TypeError, match="no field"):
        state.evolve(last_seq=1)

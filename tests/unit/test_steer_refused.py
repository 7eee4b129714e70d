"""A steer that reaches the Runtime after its native Turn ended (a race between the steer
and the Turn's end): the Runtime refuses it with code ``turn_ended``; storage hands the stored
messages over again — into the Turn running by then, or as the start of a new Turn — never drops
them, and writes no second copy of the message Items (services/storage/domain/sessions.py
``decide_steer_refused``)."""

from __future__ import annotations

from typing import Any

import pytest

from services.storage.domain.sessions import (
    Decision,
    SessionState,
    decide_create,
    decide_fact,
    decide_message,
    decide_steer_refused,
)
from shared.domain.wire import delivery_id, event_of_delivery, next_delivery_id

NOW = "2026-01-01T00:00:00.000Z"
IMG = "data:image/png;base64,iVBORw0KGgo="


def admitted(n: int, text: str = "hi", **extra: Any) -> dict[str, Any]:
    content = [{"type": "input_text", "text": text}, {"type": "input_image", "image_url": IMG}]
    return {"request_id": f"req_{n}", "event_id": f"evt_{n:032x}", "session_id": "session_1",
            "fingerprint": f"fp{n}", "messages": [{"role": "user", "content": content}],
            **extra}


def state_of(d: Decision) -> SessionState:
    assert d.state is not None
    return d.state


def steered() -> tuple[SessionState, Decision, str]:
    """A Session whose first Turn is running in Core's view, and one message steered into it."""
    s = state_of(decide_create(admitted(0, harness="codex", placement="none"), NOW))
    d = decide_message(s, admitted(1, "steer me"), NOW)
    assert d.to_deliver is not None and d.to_deliver["kind"] == "steer"
    assert s.turn_id is not None
    return state_of(d), d, s.turn_id


def refusal(turn_id: str, event_id: str, did: str | None = None) -> dict[str, Any]:
    did = did or delivery_id(event_id)
    return {"fact_id": f"dsp:refusal:{did}:steer", "kind": "steer_refused",
            "turn_id": turn_id, "event_id": event_id, "delivery_id": did}


def test_refused_while_core_still_runs_the_turn_ends_it_and_starts_a_new_one() -> None:
    s, steer, t1 = steered()
    msgs = [i for i in steer.items if i["type"] == "message"]
    event_id = steer.to_deliver["event_id"] if steer.to_deliver else ""
    d = decide_steer_refused(s, refusal(t1, event_id), msgs, NOW)
    assert [(i["type"], i["turn_id"], i["state"]) for i in d.items] == [
        ("turn", t1, "completed"), ("turn", d.items[1]["turn_id"], "started")]
    t2 = d.items[1]["turn_id"]
    assert t2 != t1
    assert [i["sequence"] for i in d.items] == [s.last_sequence + 1, s.last_sequence + 2]
    assert d.to_deliver is not None
    assert d.to_deliver["kind"] == "start" and d.to_deliver["turn_id"] == t2
    # exactly the stored content, handed over again under a new delivery id
    assert d.to_deliver["messages"] == [{"role": "user", "content": m["content"]} for m in msgs]
    assert d.to_deliver["has_images"] is True
    assert d.to_deliver["delivery_id"] == delivery_id(event_id) + "_r1"
    assert d.to_deliver["message_keys"] == [f"session_1/{m['sequence']}" for m in msgs]
    new = state_of(d)
    assert new.turn_id == t2 and new.turn_running
    # the Runtime's own end of t1, arriving later, is for an inactive Turn: no second end
    late = decide_fact(new, {"fact_id": "obs:end", "kind": "turn", "turn_id": t1,
                             "state": "completed"}, NOW)
    assert late.items == [] and late.state is None


def test_refused_after_core_saw_the_turn_end_starts_a_new_turn_only() -> None:
    s, steer, t1 = steered()
    ended = state_of(decide_fact(s, {"fact_id": "obs:end", "kind": "turn", "turn_id": t1,
                                     "state": "completed"}, NOW))
    msgs = [i for i in steer.items if i["type"] == "message"]
    assert steer.to_deliver is not None
    d = decide_steer_refused(ended, refusal(t1, steer.to_deliver["event_id"]), msgs, NOW)
    assert [(i["type"], i["state"]) for i in d.items] == [("turn", "started")]
    assert d.to_deliver is not None and d.to_deliver["kind"] == "start"
    assert t1 in str(d.items[0]["reason"])


def test_refused_while_a_newer_turn_runs_joins_that_turn() -> None:
    s, steer, t1 = steered()
    ended = state_of(decide_fact(s, {"fact_id": "obs:end", "kind": "turn", "turn_id": t1,
                                     "state": "completed"}, NOW))
    newer = state_of(decide_message(ended, admitted(2, "a new turn"), NOW))
    assert newer.turn_id != t1 and newer.turn_running
    msgs = [i for i in steer.items if i["type"] == "message"]
    assert steer.to_deliver is not None
    event_id = steer.to_deliver["event_id"]
    d = decide_steer_refused(newer, refusal(t1, event_id), msgs, NOW)
    assert d.items == []  # no Turn starts or ends
    assert d.to_deliver is not None
    assert d.to_deliver["kind"] == "steer" and d.to_deliver["turn_id"] == newer.turn_id
    # refused again (that Turn ended too): still resolvable, with the next delivery id
    again = decide_steer_refused(state_of(d), refusal(str(newer.turn_id), event_id,
                                                      d.to_deliver["delivery_id"]), msgs, NOW)
    assert again.to_deliver is not None and again.to_deliver["delivery_id"].endswith("_r2")


def test_a_refusal_whose_messages_storage_cannot_find_changes_nothing() -> None:
    s, _, t1 = steered()
    d = decide_steer_refused(s, refusal(t1, "evt_" + "f" * 32), [], NOW)
    assert d.state is None and d.items == [] and d.to_deliver is None
    assert d.log == ["steer_refused.unknown_event"]


@pytest.mark.parametrize(("did", "event", "nxt"), [
    ("dlv_" + "a" * 32, "evt_" + "a" * 32, "dlv_" + "a" * 32 + "_r1"),
    ("dlv_" + "a" * 32 + "_r1", "evt_" + "a" * 32, "dlv_" + "a" * 32 + "_r2"),
    ("dlv_" + "a" * 32 + "_r9", "evt_" + "a" * 32, "dlv_" + "a" * 32 + "_r10"),
])
def test_delivery_ids(did: str, event: str, nxt: str) -> None:
    assert event_of_delivery(did) == event
    assert next_delivery_id(did) == nxt
    assert delivery_id(event) == did.partition("_r")[0]


def test_a_foreign_delivery_id_has_no_event() -> None:
    assert event_of_delivery("something-else") is None
    assert event_of_delivery("dlv_") is None

"""The chaos checker (``tests/support/chaosload.py::check``) is not vacuous: each of its rules on
what the dispatcher and the receipt tracker produce fails on a world that breaks
it. One consistent world — one Session: a create asking for a call, the call, its result with
an image, the verdict, the Turn's end, the two delivery records, and the harness's native
announcement of the call, receipt of its result and end of the Turn — then one change per
row."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.chaosload import Input, Load, check, image_part, turns_open

Json = dict[str, Any]
SID = "session_1"
TAG = "t"


def world() -> tuple[Load, dict[str, list[Json]], list[Json], list[Json]]:
    load = Load("http://x", "k", TAG, sessions=1)
    run = load.runs[0]
    run.session_id = SID
    text = f"chaos {TAG} s0 m0 call f0 {{\"k\": \"f0\"}}"
    content = [{"type": "input_text", "text": text}, image_part("png", "a")]
    output = [{"type": "input_text", "text": "r"}, image_part("jpeg", "b")]
    run.inputs = [Input(0, "create", text, "i1", content=content, acked_at=1.0),
                  Input(0, "result", "f0", "i2", call_id="c1", output=output, acked_at=2.0)]

    def item(seq: int, type_: str, **kw: Any) -> Json:
        return {"id": f"item_{seq}", "session_id": SID, "sequence": seq, "type": type_, **kw}

    items = [
        item(1, "message", role="user", content=copy.deepcopy(content), turn_id="turn_1"),
        item(2, "turn", turn_id="turn_1", state="started", reason=None),
        item(3, "function_call", call_id="c1", name="f0", arguments="{}"),
        item(4, "function_call_output", call_id="c1", success=True,
             output=copy.deepcopy(output), error=None),
        item(5, "function_call_application", call_id="c1", state="applied", reason="ok"),
        item(6, "turn", turn_id="turn_1", state="completed", reason=None),
        item(7, "message", role="agent", turn_id="turn_1", phase="commentary",
             phase_source="derived", content=[{"type": "output_text", "text": " calling\n"}]),
    ]
    deliveries = [
        {"schema": "runtime.delivery/1", "delivery_id": "dlv_a", "session_id": SID,
         "turn_id": "turn_1", "kind": "start",
         "messages": [{"role": "user", "content": copy.deepcopy(content)}]},
        {"schema": "runtime.delivery/1", "delivery_id": "dlv_b", "session_id": SID,
         "turn_id": "turn_1", "kind": "function_result", "call_id": "c1", "name": "f0",
         "success": True, "content": copy.deepcopy(output)},
    ]
    native = {"session_id": "native-1", "parent_tool_use_id": None}
    observations = [  # Claude Code's records of the call and of the result applied
        {"schema": "runtime.observation/1", "session_id": SID, "harness": "claude_code",
         "native": {**native, "type": "assistant", "uuid": "a-1", "message": {
             "role": "assistant",
             "content": [{"type": "text", "text": " calling\n"},
                         {"type": "tool_use", "id": "c1", "name": "f0", "input": {}}]}}},
        {"schema": "runtime.observation/1", "session_id": SID, "harness": "claude_code",
         "native": {**native, "type": "user", "uuid": "u-1", "message": {
             "role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1",
                                          "is_error": False, "content": [
                                              {"type": "text", "text": "r"},
                                              {"type": "image", "source": {}}]}]}}},
        # ... and the end of the Turn as the harness printed it (Core's Turn ends completed)
        {"schema": "runtime.observation/1", "session_id": SID, "harness": "claude_code",
         "turn_id": "turn_1",
         "native": {**native, "type": "result", "subtype": "success", "is_error": False}},
    ]
    return load, {SID: items}, deliveries, observations


def run_check(change: Callable[[list[Json], list[Json], list[Json], list[Json]], None]
              ) -> list[str]:
    load, store, deliveries, observations = world()
    topic = copy.deepcopy(store[SID])
    change(store[SID], topic, deliveries, observations)
    v = check(load, store, {SID: topic}, {SID: deliveries}, {SID: observations})
    return v.problems


def test_the_consistent_world_passes() -> None:
    assert run_check(lambda *_: None) == []


def _drop(items: list[Json], pred: Callable[[Json], bool]) -> None:
    items[:] = [it for it in items if not pred(it)]


def _renumber(items: list[Json]) -> None:
    for n, it in enumerate(items, 1):
        it["sequence"] = n


def _drop_renumber(items: list[Json], pred: Callable[[Json], bool]) -> None:
    _drop(items, pred)
    _renumber(items)


CASES: list[tuple[str, Callable[[list[Json], list[Json], list[Json], list[Json]], None], str]] = [
    ("the result never delivered",
     lambda s, t, d, o: _drop(d, lambda x: x["kind"] == "function_result"), "s0/result/f0"),
    ("the message never delivered",
     lambda s, t, d, o: _drop(d, lambda x: x["kind"] == "start"), "s0/create/"),
    ("the message delivered under a second delivery id",
     lambda s, t, d, o: d.append({**copy.deepcopy(d[0]), "delivery_id": "dlv_z",
                                  "kind": "steer"}), "twice"),
    ("the result delivered without its image",
     lambda s, t, d, o: d[1]["content"].pop(), "delivered altered"),
    ("a steer refused (turn ended) and never handed over again",
     lambda s, t, d, o: (d[0].update(kind="steer"), o.append({"refusal": {
         "delivery_id": "dlv_a", "kind": "steer", "code": "turn_ended", "reason": "ended"}})),
     "never handed over again"),
    ("another Runtime refusal",
     lambda s, t, d, o: o.append({"refusal": {"delivery_id": "dlv_b",
                                              "kind": "function_result", "reason": "no"}}),
     "the Runtime refused dlv_b"),
    ("no verdict for the call",
     lambda s, t, d, o: [_drop_renumber(x, lambda i: i["type"] == "function_call_application")
                         for x in (s, t)], "call c1 has 0 verdicts"),
    ("two verdicts for the call",
     lambda s, t, d, o: [x.append({**x[4], "id": "item_7", "sequence": 7}) for x in (s, t)],
     "call c1 has 2 verdicts"),
    ("the verdict uncertain",
     lambda s, t, d, o: [x[4].update(state="uncertain") for x in (s, t)], "call c1 uncertain"),
    ("the Turn never ended",
     lambda s, t, d, o: [_drop(x, lambda i: i.get("state") == "completed") for x in (s, t)],
     "Turn turn_1 ['started']"),
    ("the Turn failed",
     lambda s, t, d, o: [x[5].update(state="failed", reason="gone") for x in (s, t)],
     "Turn turn_1 failed: gone"),
    ("the Turn ended twice",
     lambda s, t, d, o: [x.append({**x[5], "id": "item_7", "sequence": 7}) for x in (s, t)],
     "Turn turn_1 ['started', 'completed', 'completed']"),
    ("the stored image is not the one sent",
     lambda s, t, d, o: s[0]["content"].__setitem__(1, image_part("png", "other")),
     "stored altered"),
    ("session.items misses the store's last Item",
     lambda s, t, d, o: t.pop(), "disagree"),
    ("the call applied without its native receipt",
     lambda s, t, d, o: o.pop(1), "call c1 applied, but no native receipt"),
    ("an agent message the harness printed is no Item",
     lambda s, t, d, o: [_drop_renumber(x, lambda i: i.get("role") == "agent") for x in (s, t)],
     "agent message ' calling\\n' printed 1×, 0 Item(s)"),
    ("an agent message is two Items",
     lambda s, t, d, o: [x.append({**x[6], "id": "item_8", "sequence": 8}) for x in (s, t)],
     "printed 1×, 2 Item(s)"),
    ("an agent message stored trimmed",
     lambda s, t, d, o: s[6].update(content=[{"type": "output_text", "text": "calling"}]),
     "agent message 'calling' printed 0×, 1 Item(s)"),
    ("the call applied on a receipt of another result",
     lambda s, t, d, o: o[1]["native"]["message"]["content"][0]["content"][0].update(
         text="other"), "call c1 applied, but no native receipt"),
]


@pytest.mark.parametrize(("name", "change", "expect"), CASES, ids=[c[0] for c in CASES])
def test_each_broken_rule_is_reported(
        name: str, change: Callable[[list[Json], list[Json], list[Json], list[Json]], None],
        expect: str) -> None:
    problems = run_check(change)
    assert any(expect in p for p in problems), problems


def test_a_refused_steer_handed_over_again_passes() -> None:
    def change(s: list[Json], t: list[Json], d: list[Json], o: list[Json]) -> None:
        d[0]["kind"] = "steer"
        o.append({"refusal": {"delivery_id": "dlv_a", "kind": "steer", "code": "turn_ended",
                              "reason": "ended"}})
        d.append({**copy.deepcopy(d[0]), "delivery_id": "dlv_a_r1", "kind": "start"})

    assert run_check(change) == []


def test_turns_open_names_the_turn_without_an_end() -> None:
    _, store, _, _ = world()
    assert turns_open(store[SID]) == set()
    assert turns_open(store[SID][:5]) == {"turn_1"}

"""The agent's side of a Session (CONTRACT §2, "Public Items"): which native records are agent
messages and usage reports (``services.storage.domain.agent_output``), how storage's observation
facts keep the harness's printed order (``services.storage.handler.record_to_inputs``), and how the
Session state machine publishes them — phase given by the harness, or derived from what follows
(``services.storage.domain.sessions``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.storage.domain.agent_output import AgentSaid, UsageReported, add_usage, said_all
from services.storage.domain.sessions import (
    SessionState,
    decide_create,
    decide_fact,
    decide_message,
)
from services.storage.handler import record_to_inputs
from shared import records

NOW = "2026-01-01T00:00:00.000Z"
MSG = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
TEXT = "\n  It is sunny in Paris.\n\n\n21°C.  \n"  # blank lines, leading and trailing spaces


def codex_agent(text: str, *, item_id: str = "msg_1", phase: Any = None, thread: str = "th",
                turn: str = "tu", **extra: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "agentMessage", "id": item_id, "text": text, **extra}
    if phase is not None:
        item["phase"] = phase
    return {"method": "item/completed", "params": {"threadId": thread, "turnId": turn,
                                                   "item": item}}


def codex_usage(last: dict[str, int], total: int, thread: str = "th") -> dict[str, Any]:
    return {"method": "thread/tokenUsage/updated", "params": {
        "threadId": thread, "turnId": "tu", "tokenUsage": {
            "last": last, "total": {"totalTokens": total}, "modelContextWindow": None}}}


def claude_assistant(*blocks: dict[str, Any], uuid: str = "u1", **extra: Any) -> dict[str, Any]:
    return {"type": "assistant", "uuid": uuid, "session_id": "n1", "parent_tool_use_id": None,
            "message": {"model": "m", "content": list(blocks)}, **extra}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def tool_use(cid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": "mcp__core__get_weather", "input": {}}


# --------------------------------------------------------------------------- parsing

@pytest.mark.parametrize(("harness", "native", "root", "want"), [
    # Codex: an agentMessage, its text exactly; the phase when commentary / final_answer
    ("codex", codex_agent(TEXT), None, [AgentSaid("codex:th:tu:msg_1", TEXT, None)]),
    ("codex", codex_agent("a", phase="final_answer"), None,
     [AgentSaid("codex:th:tu:msg_1", "a", "final_answer")]),
    ("codex", codex_agent("a", phase="commentary"), None,
     [AgentSaid("codex:th:tu:msg_1", "a", "commentary")]),
    # partial_answer and unknown phases are no phase: Core derives it
    ("codex", codex_agent("a", phase="partial_answer"), None,
     [AgentSaid("codex:th:tu:msg_1", "a", None)]),
    ("codex", codex_agent("a", phase="bogus"), None, [AgentSaid("codex:th:tu:msg_1", "a", None)]),
    ("codex", codex_agent(""), "th", [AgentSaid("codex:th:tu:msg_1", "", None)]),  # empty text
    # another thread than the Session's root (a subagent's): nothing
    ("codex", codex_agent("sub", thread="child"), "th", []),
    # not an agent message
    ("codex", {"method": "item/started", "params": {"threadId": "th", "item": {
        "type": "agentMessage", "id": "m", "text": ""}}}, None, []),
    ("codex", {"method": "item/completed", "params": {"threadId": "th", "item": {
        "type": "userMessage", "id": "m", "content": []}}}, None, []),
    ("codex", {"method": "item/completed", "params": {"threadId": "th", "item": {
        "type": "agentMessage", "id": "m", "text": 3}}}, None, []),
    ("codex", {"method": "item/agentMessage/delta", "params": {"delta": "x"}}, None, []),
    # usage: the last response's counts, keyed by the running total
    ("codex", codex_usage({"inputTokens": 10, "outputTokens": 2, "cachedInputTokens": 4}, 16),
     None, [UsageReported("codex:th:tu:16", {"input_tokens": 10, "output_tokens": 2,
                                              "cached_input_tokens": 4})]),
    ("codex", codex_usage({"inputTokens": 1, "outputTokens": 1, "cachedInputTokens": 0}, 2,
                          thread="child"), "th", []),
    # Claude Code: each text block of a live root assistant record
    ("claude_code", claude_assistant(text(TEXT)), None, [AgentSaid("claude:u1:0", TEXT, None)]),
    ("claude_code", claude_assistant(text("a"), tool_use("t1"), text("b")), None,
     [AgentSaid("claude:u1:0", "a", None), AgentSaid("claude:u1:2", "b", None)]),
    ("claude_code", claude_assistant({"type": "thinking", "thinking": "hm"}), None, []),
    # a subagent's text, a replayed or synthetic record, the harness's own synthetic message
    ("claude_code", claude_assistant(text("sub"), parent_tool_use_id="toolu_task"), None, []),
    ("claude_code", claude_assistant(text("x"), isReplay=True), None, []),
    ("claude_code", claude_assistant(text("x"), isSynthetic=True), None, []),
    ("claude_code", claude_assistant(text("x"), isReplay=0), None, []),  # not exactly false
    ("claude_code", {**claude_assistant(text("API Error")), "message": {
        "model": "<synthetic>", "content": [text("API Error")]}}, None, []),
    ("claude_code", {"type": "user", "uuid": "u", "isReplay": True, "parent_tool_use_id": None,
                     "message": {"content": [text("mine")]}}, None, []),
    # Claude Code usage: the result record's
    ("claude_code", {"type": "result", "subtype": "success", "uuid": "r1", "session_id": "n",
                     "usage": {"input_tokens": 7, "output_tokens": 3,
                               "cache_read_input_tokens": 5,
                               "cache_creation_input_tokens": 9}}, None,
     [UsageReported("claude:r1", {"input_tokens": 7, "output_tokens": 3,
                                  "cached_input_tokens": 5})]),
    ("claude_code", {"type": "result", "subtype": "success", "uuid": "r1"}, None, []),
    # other harnesses, other values
    ("minimax_code", claude_assistant(text("x")), None, []),
    ("codex", None, None, []),
    ("claude_code", "not an object", None, []),
])
def test_native_records_to_agent_output(harness: str, native: Any, root: str | None,
                                        want: list[Any]) -> None:
    assert said_all(harness, native, root_thread_id=root) == want


def test_a_claude_record_without_uuid_is_keyed_by_the_observation() -> None:
    rec = claude_assistant(text("x"))
    del rec["uuid"]
    assert said_all("claude_code", rec, fallback_id="obs_1") == [
        AgentSaid("claude:obs_1:0", "x", None)]


def test_usage_sums_field_by_field() -> None:
    a = {"input_tokens": 1, "output_tokens": 2, "cached_input_tokens": 3}
    assert add_usage(None, a) == a
    assert add_usage(a, a) == {"input_tokens": 2, "output_tokens": 4, "cached_input_tokens": 6}


# --------------------------------------------------------------------------- facts, in order

OBS_SID = "session_" + "1" * 32
AT = "2026-11-30T10:00:00Z"


def observation(harness: str, native: Any, **extra: Any) -> dict[str, Any]:
    return records.observation_record(runtime_id="rt_1", session_id=OBS_SID,
                                      harness=harness, native=native, turn_id="turn_1",
                                      observation_id="obs_1") | {"observed_at": AT} | extra


def test_a_claude_record_gives_its_blocks_facts_in_printed_order() -> None:
    facts = record_to_inputs(observation("claude_code", claude_assistant(
        text("first"), tool_use("t1"), text("second"))))
    assert [(f["kind"], f.get("text") or f.get("call_id")) for f in facts] == [
        ("agent_message", "first"), ("function_call", "t1"), ("agent_message", "second")]
    assert facts[0]["fact_id"] == f"obs:{OBS_SID}:agent:claude:u1:0"
    assert facts[0]["turn_id"] == "turn_1" and facts[0]["phase"] is None


def test_a_result_gives_its_usage_before_the_turn_end() -> None:
    facts = record_to_inputs(observation("claude_code", {
        "type": "result", "subtype": "success", "uuid": "r1", "session_id": "n",
        "usage": {"input_tokens": 1, "output_tokens": 2}}))
    assert [f["kind"] for f in facts] == ["usage", "turn"]
    assert facts[0]["usage"] == {"input_tokens": 1, "output_tokens": 2, "cached_input_tokens": 0}


def test_codex_records_of_another_thread_than_the_named_root_give_no_message() -> None:
    assert record_to_inputs(observation("codex", codex_agent("x", thread="child"),
                                        root_thread_id="th")) == []
    [fact] = record_to_inputs(observation("codex", codex_agent("x"), root_thread_id="th"))
    assert fact["kind"] == "agent_message" and fact["fact_id"].endswith("codex:th:tu:msg_1")


# --------------------------------------------------------------------------- phases

def started() -> SessionState:
    d = decide_create({"request_id": "req_0", "event_id": "evt_0", "session_id": "session_1",
                       "fingerprint": "fp", "messages": MSG, "harness": "codex",
                       "placement": "none"}, NOW)
    assert d.state is not None
    return d.state


def said(t: str, n: int, phase: str | None = None, turn_id: str | None = None) -> dict[str, Any]:
    return {"fact_id": f"said{n}", "kind": "agent_message", "text": t, "phase": phase,
            "turn_id": turn_id}


def call(n: int) -> dict[str, Any]:
    return {"fact_id": f"call{n}", "kind": "function_call", "call_id": f"c{n}", "name": "f",
            "arguments": {}}


def usage(n: int, i: int, o: int, c: int = 0) -> dict[str, Any]:
    return {"fact_id": f"usage{n}", "kind": "usage", "turn_id": None,
            "usage": {"input_tokens": i, "output_tokens": o, "cached_input_tokens": c}}


END = {"fact_id": "end", "kind": "turn", "turn_id": None, "state": "completed", "reason": None}


def play(steps: list[dict[str, Any]], state: SessionState | None = None
         ) -> tuple[list[dict[str, Any]], SessionState]:
    s = state or started()
    items: list[dict[str, Any]] = []
    for f in steps:
        d = decide_fact(s, f, NOW)
        items += d.items
        if d.state is not None:
            s = d.state
    return items, s


def shape(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for i in items:
        if i["type"] == "message":
            out.append(("agent", i["content"][0]["text"], i["phase"], i["phase_source"]))
        elif i["type"] == "function_call":
            out.append(("call", i["call_id"]))
        else:
            out.append((i["type"], i.get("state")))
    return out


@pytest.mark.parametrize(("steps", "want"), [
    # text, a call, the answer: commentary before the call, the answer before the Turn's end
    ([said("look", 1), call(1), said(TEXT, 2), END],
     [("agent", "look", "commentary", "derived"), ("call", "c1"),
      ("agent", TEXT, "final_answer", "derived"), ("turn", "completed")]),
    # two messages in a row: the first is not the last
    ([said("a", 1), said("b", 2), END],
     [("agent", "a", "commentary", "derived"), ("agent", "b", "final_answer", "derived"),
      ("turn", "completed")]),
    # a message, then a call, then the Turn ends: no final answer
    ([said("a", 1), call(1), END],
     [("agent", "a", "commentary", "derived"), ("call", "c1"), ("turn", "completed")]),
    # the harness's own phases are kept, marked provider
    ([said("a", 1, "commentary"), said("b", 2, "final_answer"), END],
     [("agent", "a", "commentary", "provider"), ("agent", "b", "final_answer", "provider"),
      ("turn", "completed")]),
    # a held message followed by a provider message is commentary
    ([said("a", 1), said("b", 2, "final_answer"), END],
     [("agent", "a", "commentary", "derived"), ("agent", "b", "final_answer", "provider"),
      ("turn", "completed")]),
    # a failed Turn's last message is still its answer
    ([said("a", 1), {**END, "state": "failed", "reason": "x"}],
     [("agent", "a", "final_answer", "derived"), ("turn", "failed")]),
    # a message printed after Core ended its Turn: published at once (nothing can follow it)
    ([END, said("late", 1)],
     [("turn", "completed"), ("agent", "late", "final_answer", "derived")]),
    # no message at all
    ([call(1), END], [("call", "c1"), ("turn", "completed")]),
])
def test_phases(steps: list[dict[str, Any]], want: list[tuple[Any, ...]]) -> None:
    items, state = play(steps)
    assert shape(items) == want
    assert [i["sequence"] for i in items] == list(range(3, 3 + len(items)))  # no gap
    assert state.said is None


def test_the_agent_item_is_the_contract_shape() -> None:
    items, _ = play([said(TEXT, 1), END])
    agent = items[0]
    assert {k: v for k, v in agent.items() if k not in ("id", "created_at")} == {
        "session_id": "session_1", "sequence": 3, "type": "message", "role": "agent",
        "turn_id": started().turn_id, "content": [{"type": "output_text", "text": TEXT}],
        "phase": "final_answer", "phase_source": "derived"}


def test_a_held_message_waits_in_the_state_and_survives_its_document() -> None:
    items, s = play([said("a", 1)])
    assert items == [] and s.said == {"turn_id": s.turn_id, "text": "a"}
    again = SessionState.from_doc(s.to_doc())
    items, _ = play([END], again)
    assert shape(items) == [("agent", "a", "final_answer", "derived"), ("turn", "completed")]


def test_turn_usage_is_summed_and_carried_by_the_end_only() -> None:
    items, s = play([usage(1, 10, 2, 4), usage(2, 5, 1), END])
    [end] = items
    assert end["usage"] == {"input_tokens": 15, "output_tokens": 3, "cached_input_tokens": 4}
    assert s.turn_usage is None
    # the next Turn starts from nothing: its end reports null when the harness reported none
    d = decide_message(s, {"request_id": "req_1", "event_id": "evt_1", "session_id": "session_1",
                           "fingerprint": "fp1", "messages": MSG}, NOW)
    assert d.state is not None
    assert "usage" not in d.items[-1]  # turn started carries none
    items, _ = play([{**END, "fact_id": "end2"}], d.state)
    assert items[0]["usage"] is None


def test_usage_for_a_turn_not_running_is_ignored() -> None:
    items, s = play([END, usage(1, 1, 1)])
    assert s.turn_usage is None and [i["type"] for i in items] == ["turn"]


# ------------------------------------------------------------------- the rule, as a property

STEP = st.one_of(
    st.tuples(st.just("said"), st.text(max_size=5),
              st.sampled_from([None, None, "commentary", "final_answer"])),
    st.tuples(st.just("call")),
    st.tuples(st.just("usage"), st.integers(0, 50), st.integers(0, 50)),
)


@given(st.lists(STEP, max_size=12))
def test_every_message_is_one_item_and_the_derived_phase_follows_the_rule(
        steps: list[tuple[Any, ...]]) -> None:
    """Any Turn: each message is published once, in order with the calls; a derived message is
    the final answer exactly when no call and no other message follows it in its Turn; the
    harness's own phase is kept; the Turn's end carries the sum of its usage."""
    facts: list[dict[str, Any]] = []
    for n, step in enumerate(steps):
        if step[0] == "said":
            facts.append(said(step[1], n, step[2]))
        elif step[0] == "call":
            facts.append(call(n))
        else:
            facts.append(usage(n, step[1], step[2]))
    items, _ = play([*facts, END])
    published = [i for i in items if i["type"] != "turn"]
    expected = [f for f in facts if f["kind"] != "usage"]
    assert len(published) == len(expected)
    for n, (item, fact) in enumerate(zip(published, expected, strict=True)):
        if fact["kind"] == "function_call":
            assert item["type"] == "function_call" and item["call_id"] == fact["call_id"]
            continue
        assert item["content"] == [{"type": "output_text", "text": fact["text"]}]
        if fact["phase"] is not None:
            assert (item["phase"], item["phase_source"]) == (fact["phase"], "provider")
        else:
            last = n == len(expected) - 1
            assert (item["phase"], item["phase_source"]) == (
                "final_answer" if last else "commentary", "derived")
    [end] = [i for i in items if i["type"] == "turn"]
    assert items[-1] is end
    sums = [f["usage"] for f in facts if f["kind"] == "usage"]
    assert end["usage"] == (None if not sums else {
        k: sum(u[k] for u in sums) for k in ("input_tokens", "output_tokens",
                                             "cached_input_tokens")})

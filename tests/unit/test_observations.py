"""Which native observations (CONTRACT §2) become function_call / turn facts for storage."""

from __future__ import annotations

from typing import Any

import pytest

from shared.domain.observations import CallOpened, TurnEnded, classify_all


def claude_assistant(*blocks: dict[str, Any], parent: str | None = None) -> dict[str, Any]:
    return {"type": "assistant", "uuid": "u", "session_id": "n1", "parent_tool_use_id": parent,
            "message": {"content": list(blocks)}}


def tool_use(cid: str, name: str = "f") -> dict[str, Any]:
    return {"type": "tool_use", "id": cid, "name": name, "input": {"a": 1}}


def test_claude_parallel_tool_uses_are_each_a_call() -> None:
    got = classify_all("claude_code", claude_assistant(
        {"type": "text", "text": "let me look"}, tool_use("t1", "a"), tool_use("t2", "b")))
    assert got == [
        CallOpened("t1", "a", {"a": 1}, {"session_id": "n1"}),
        CallOpened("t2", "b", {"a": 1}, {"session_id": "n1"}),
    ]


def test_claude_subagent_calls_are_not_public_calls() -> None:
    assert classify_all("claude_code", claude_assistant(tool_use("t1"), parent="toolu_x")) == []


def test_codex_dynamic_tool_call() -> None:
    native = {"method": "item/started", "params": {"threadId": "th", "turnId": "tu", "item": {
        "type": "dynamicToolCall", "id": "c1", "tool": "search", "arguments": {"q": "x"}}}}
    assert classify_all("codex", native) == [
        CallOpened("c1", "search", {"q": "x"}, {"thread_id": "th", "turn_id": "tu"})]


@pytest.mark.parametrize(("harness", "native", "state"), [
    ("codex", {"method": "turn/completed", "params": {"threadId": "t", "turnId": "u",
                                                      "status": "completed"}}, "completed"),
    ("codex", {"method": "turn/completed", "params": {"threadId": "t", "turnId": "u",
                                                      "status": "failed"}}, "failed"),
    ("claude_code", {"type": "result", "session_id": "n", "subtype": "success"}, "completed"),
    ("claude_code", {"type": "result", "session_id": "n", "subtype": "error"}, "failed"),
    ("minimax_code", {"type": "result", "session_id": "n", "subtype": "success"}, "completed"),
])
def test_turn_ends(harness: str, native: dict[str, Any], state: str) -> None:
    [fact] = classify_all(harness, native)
    assert isinstance(fact, TurnEnded) and fact.state == state


@pytest.mark.parametrize(("harness", "native"), [
    ("codex", {"method": "item/completed", "params": {"item": {"type": "dynamicToolCall"}}}),
    ("codex", {"method": "item/started", "params": {"item": {"type": "agentMessage"}}}),
    ("claude_code", {"type": "user", "message": {"content": []}}),
    ("claude_code", {"type": "tool_release", "session_id": "n", "tool_use_id": "t"}),
    ("minimax_code", claude_assistant(tool_use("t1"))),  # no public functions
    ("codex", None),
    ("claude_code", "not an object"),
])
def test_other_records_carry_no_fact(harness: str, native: Any) -> None:
    assert classify_all(harness, native) == []

"""The observation classifier and the Codex receipt matcher on what the real ``codex
app-server`` 0.169 printed (tests/data/native/codex/*.jsonl, re-recorded by
``python -m tests.golden.record_codex``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.domain import receipts
from shared.domain.observations import CallOpened, TurnEnded, classify_all

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "native" / "codex"
PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
       "z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def load(case: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (GOLDEN / f"{case}.jsonl").read_text().splitlines()]


def facts(case: str) -> list[CallOpened | TurnEnded]:
    return [f for m in load(case) for f in classify_all("codex", m)]


def the_call(case: str) -> CallOpened:
    calls = [f for f in facts(case) if isinstance(f, CallOpened)]
    assert len(calls) == 1, calls
    return calls[0]


def completed(case: str) -> dict[str, Any]:
    found = [m for m in load(case) if m.get("method") == "item/completed"
             and m["params"]["item"]["type"] == "dynamicToolCall"]
    assert len(found) == 1
    return found[0]


# case, the Turn's end state
@pytest.mark.parametrize(("case", "state"), [
    ("plain_text", "completed"), ("tool_text", "completed"), ("tool_image", "completed"),
    ("tool_failed", "completed"), ("steer", "completed"), ("unanswered", "failed"),
])
def test_every_real_turn_ends_once_with_its_native_turn_id(case: str, state: str) -> None:
    ends = [f for f in facts(case) if isinstance(f, TurnEnded)]
    started = [m["params"]["turn"]["id"] for m in load(case) if m.get("method") == "turn/started"]
    assert ends == [TurnEnded(state, started[0])]


@pytest.mark.parametrize("case", ["tool_text", "tool_image", "tool_failed", "unanswered"])
def test_the_real_call_is_one_function_call_with_thread_and_turn(case: str) -> None:
    call = the_call(case)
    req = next(m for m in load(case) if m.get("method") == "item/tool/call")
    assert (call.call_id, call.name, call.arguments) == (
        req["params"]["callId"], "get_weather", {"city": "Paris"})
    assert call.native_ids == {"thread_id": req["params"]["threadId"],
                               "turn_id": req["params"]["turnId"]}
    assert not [f for f in facts("plain_text") if isinstance(f, CallOpened)]


def _expected(case: str, success: bool, content: list[dict[str, Any]],
              name: str = "get_weather") -> receipts.Expected:
    call = the_call(case)
    return receipts.expect(harness="codex", session_id="session_x", call_id=call.call_id,
                           name=name, success=success, content=content,
                           thread_id=call.native_ids["thread_id"],
                           turn_id=call.native_ids["turn_id"])


TEXT = [{"type": "input_text", "text": "sunny, 21 C"}]
IMAGE = [{"type": "input_text", "text": "the radar"}, {"type": "input_image", "image_url": PNG},
         {"type": "input_text", "text": "after the image"}]
FAILED = [{"type": "input_text", "text": "partial output"},
          {"type": "input_text", "text": "city not found"}]


@pytest.mark.parametrize(("case", "success", "content"), [
    ("tool_text", True, TEXT), ("tool_image", True, IMAGE), ("tool_failed", False, FAILED),
])
def test_the_real_receipt_confirms_exactly_what_was_answered(
        case: str, success: bool, content: list[dict[str, Any]]) -> None:
    native = completed(case)
    assert receipts.match_native(_expected(case, success, content), native) == receipts.CONFIRMED


# each row: what differs from the real answer → the rule that must reject it
@pytest.mark.parametrize(("case", "success", "content", "name", "rule"), [
    ("tool_text", True, [{"type": "input_text", "text": "sunny, 21 C!"}], "get_weather",
     "contentItems[0].text"),
    ("tool_text", False, TEXT, "get_weather", "item.status"),
    ("tool_text", True, TEXT, "other_tool", "item.tool"),
    ("tool_image", True, [IMAGE[0], IMAGE[2], IMAGE[1]], "get_weather", "contentItems[1].type"),
    ("tool_image", True, IMAGE[:2], "get_weather", "contentItems.count"),
    ("tool_failed", True, FAILED, "get_weather", "item.status"),
])
def test_the_real_receipt_rejects_a_different_result(
        case: str, success: bool, content: list[dict[str, Any]], name: str, rule: str) -> None:
    verdict = receipts.match_native(_expected(case, success, content, name), completed(case))
    assert isinstance(verdict, receipts.NotAMatch) and verdict.field == rule


def test_a_call_ended_unanswered_is_a_release_never_a_confirmation() -> None:
    """What the real binary prints when the Turn ends with the call unanswered (interrupted):
    item/completed, status failed, success false, contentItems [] — no item/released. It
    releases a call whose result is not exactly a failure with no content."""
    native = completed("unanswered")
    item = native["params"]["item"]
    assert (item["contentItems"], item["status"], item["success"]) == ([], "failed", False)
    for success, content in ((True, []), (True, TEXT), (False, FAILED)):
        assert receipts.match_native(_expected("unanswered", success, content),
                                     native) == receipts.RELEASED
    assert not any(m.get("method") == "item/released" for m in load("unanswered"))


def test_a_release_of_another_turn_does_not_release_the_call() -> None:
    native = json.loads(json.dumps(completed("unanswered")))
    native["params"]["turnId"] = "another"
    verdict = receipts.match_native(_expected("unanswered", False, TEXT), native)
    assert isinstance(verdict, receipts.NotAMatch) and verdict.field == "turnId"


def test_a_bare_failed_result_is_never_confirmed_by_the_release_record() -> None:
    """Seed: "A timeout or native release without confirmation leaves application uncertain."
    A result of just ``{"success": false}`` is delivered as an empty list; what Codex prints
    when it applies that answer is byte for byte the record it prints when it releases the
    unanswered call (golden ``unanswered.jsonl``: status failed, success false, contentItems
    []). A record that may be a release is not a confirmation: it releases."""
    assert receipts.match_native(_expected("unanswered", False, []),
                                 completed("unanswered")) == receipts.RELEASED

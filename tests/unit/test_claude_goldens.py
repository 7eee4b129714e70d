"""The observation classifier and the Claude receipt matcher on what the real Claude Code
2.1.328 printed (tests/data/native/claude_code/*.jsonl, ``python -m tests.golden.record_claude``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from shared.domain.observations import CallOpened, TurnEnded, classify_all
from shared.domain.receipts import Confirmed, NotAMatch, expect, match_native
from tests.support.builders import text as t

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "native" / "claude_code"
CORE_SESSION = "session_golden"


def records(case: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (GOLDEN / f"{case}.jsonl").read_text().splitlines() if x]


def facts(case: str) -> list[CallOpened | TurnEnded]:
    return [f for r in records(case) for f in classify_all("claude_code", r)]


def root_call(case: str) -> tuple[str, str]:
    """(native session id, call id) of the run's one public call."""
    calls = [f for f in facts(case) if isinstance(f, CallOpened)]
    assert len(calls) == 1, calls
    return str(calls[0].native_ids["session_id"]), calls[0].call_id


def confirmations(case: str, success: bool, content: list[dict[str, str]],
                  call: tuple[str, str] | None = None) -> list[int]:
    native_session, call_id = call or root_call(case)
    exp = expect(harness="claude_code", session_id=CORE_SESSION, call_id=call_id,
                 name="get_weather", success=success, content=content,
                 native_session_id=native_session)
    return [i for i, r in enumerate(records(case))
            if isinstance(match_native(exp, r), Confirmed)]


ALL = sorted(p.stem for p in GOLDEN.glob("*.jsonl"))


@pytest.mark.parametrize("case", ALL)
def test_every_golden_run_ends_its_turn_completed(case: str) -> None:
    ends = [f for f in facts(case) if isinstance(f, TurnEnded)]
    assert ends and all(e.state == "completed" for e in ends)
    assert records(case)[-1]["type"] == "result"


@pytest.mark.parametrize(("case", "calls"), [
    ("tool_call_text_result", 1), ("tool_result_image", 1), ("tool_result_error", 1),
    ("image_message", 0), ("steering", 0),
    ("subagent", 0),  # the root Agent tool_use is a built-in; the subagent's call is not root
])
def test_public_calls_are_the_root_mcp_core_tool_uses(case: str, calls: int) -> None:
    opened = [f for f in facts(case) if isinstance(f, CallOpened)]
    assert len(opened) == calls
    for c in opened:
        assert c.name == "get_weather"  # mcp__core__get_weather, the public name
        assert c.call_id.startswith("toolu_") and c.arguments == {"city": "Oslo"}


def test_text_result_confirmed_by_exactly_the_live_root_tool_result() -> None:
    hits = confirmations("tool_call_text_result", True, [t("sunny, 21 C")])
    assert len(hits) == 1
    rec = records("tool_call_text_result")[hits[0]]
    assert rec["type"] == "user" and rec["parent_tool_use_id"] is None and "isReplay" not in rec
    assert confirmations("tool_call_text_result", True, [t("sunny, 21 C ")]) == []
    assert confirmations("tool_call_text_result", False, [t("sunny, 21 C")]) == []


def test_image_result_confirmed_with_an_image_at_the_image_position() -> None:
    rec = next(r for r in records("tool_result_image") if r["type"] == "user"
               and any(b.get("type") == "tool_result" for b in r["message"]["content"]))
    data = rec["message"]["content"][0]["content"][1]["source"]["data"]
    base64.b64decode(data, validate=True)
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}
    assert len(confirmations("tool_result_image", True, [t("map:"), image])) == 1
    assert confirmations("tool_result_image", True, [image, t("map:")]) == []
    assert confirmations("tool_result_image", True, [t("map:")]) == []


def test_failed_result_as_printed_joined_text_and_is_error() -> None:
    # The real binary prints a failed result's text blocks as one "\n"-joined string.
    assert len(confirmations("tool_result_error", False,
                             [t("partial: none"), t("no such city")])) == 1
    assert confirmations("tool_result_error", True, [t("partial: none"), t("no such city")]) == []
    assert confirmations("tool_result_error", False, [t("partial: none no such city")]) == []
    assert confirmations("tool_result_error", False, [t("no such city")]) == []


def test_replayed_user_records_are_never_receipts_nor_calls() -> None:
    replays = [r for case in ALL for r in records(case) if r.get("isReplay") is True]
    assert len(replays) >= len(ALL)  # --replay-user-messages echoes every input
    for r in replays:
        assert r["type"] == "user" and classify_all("claude_code", r) == []


def test_subagent_tool_result_never_confirms() -> None:
    recs = records("subagent")
    sub_call = next(r for r in recs if r["type"] == "assistant" and r["parent_tool_use_id"]
                    and r["message"]["content"][0]["type"] == "tool_use")
    call_id = sub_call["message"]["content"][0]["id"]
    result = next(r for r in recs if r["type"] == "user" and r["parent_tool_use_id"]
                  and r["message"]["content"][0].get("tool_use_id") == call_id)
    assert result["parent_tool_use_id"] == sub_call["parent_tool_use_id"]
    exp = expect(harness="claude_code", session_id=CORE_SESSION, call_id=call_id,
                 name="get_weather", success=True, content=[t("sunny, 21 C")],
                 native_session_id=sub_call["session_id"])
    verdict = match_native(exp, result)
    assert isinstance(verdict, NotAMatch) and verdict.field == "parent_tool_use_id"
    # Everything but the parent link matches: the rule alone keeps it from confirming.
    assert isinstance(match_native(exp, {**result, "parent_tool_use_id": None}), Confirmed)


def _printed_tool_result(case: str) -> dict[str, Any]:
    """The run's live root tool_result record without what differs per run (ids, times)."""
    [rec] = [r for r in records(case) if r["type"] == "user" and "isReplay" not in r
             and any(b.get("type") == "tool_result" for b in r["message"]["content"])]
    rec = json.loads(json.dumps(rec))
    for k in ("uuid", "timestamp", "session_id"):
        rec.pop(k)
    for b in rec["message"]["content"]:
        b.pop("tool_use_id")
    for m in rec["tool_result_meta"]:
        m.pop("id")
    return rec


def test_a_failed_results_block_count_is_not_in_what_the_binary_prints() -> None:
    """Issue 57 item 5. Seed 000 asks a Claude Code receipt for the exact block count and order.
    The runs ``tool_result_error`` (the bridge answered two text blocks "partial: none", "no
    such city", isError) and ``tool_result_error_one_block`` (one block "partial: none\\nno such
    city") print the same record, ids and times aside: Claude Code 2.1.328 joins a failed
    result's blocks into one string before it records it. No matcher can tell the two apart
    from the record, so each delivery is confirmed by either record (docs/receipts.md, "A
    failed result's block count")."""
    two = _printed_tool_result("tool_result_error")
    assert two == _printed_tool_result("tool_result_error_one_block")
    assert two["message"]["content"][0]["content"] == "partial: none\nno such city"
    for case in ("tool_result_error", "tool_result_error_one_block"):
        assert len(confirmations(case, False, [t("partial: none"), t("no such city")])) == 1
        assert len(confirmations(case, False, [t("partial: none\nno such city")])) == 1

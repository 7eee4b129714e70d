"""The chaos checker's own receipt and Turn-end rules (``tests/support/receipt_rules.py``,
written from the seed, not imported from the product) against what the real binaries printed
(``tests/data/native/{codex,claude_code}``): each real receipt confirms exactly its result,
once; every change the seed names (text, order, count, flag, name, Turn, Session) makes it
confirm nothing; replayed, synthetic, Subagent and release records never confirm."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import receipt_rules as rules

DATA = Path(__file__).resolve().parents[1] / "data" / "native"
PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
       "z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")


def t(text: str) -> dict[str, Any]:
    return {"type": "input_text", "text": text}


def load(harness: str, case: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (DATA / harness / f"{case}.jsonl").read_text().splitlines()
            if x.strip()]


def the_call(harness: str, case: str) -> rules.Announced:
    calls = {k: c for k, c in rules.announced(harness, load(harness, case)).items()
             if c.name == "get_weather"}  # the public function the goldens were recorded with
    assert len(calls) == 1, calls
    return next(iter(calls.values()))


def test_the_checker_never_imports_the_products_matcher() -> None:
    """The point of the module: an independent reading. It imports nothing of the product."""
    tree = ast.parse((Path(rules.__file__)).read_text())
    imported = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m.split(".")[0] in ("shared", "services")}, imported


# ------------------------------------------------------------------------------ codex

CODEX_TEXT = [t("sunny, 21 C")]
CODEX_IMAGE = [t("the radar"), {"type": "input_image", "image_url": PNG}, t("after the image")]
CODEX_FAILED = [t("partial output"), t("city not found")]


@pytest.mark.parametrize(("case", "success", "content"), [
    ("tool_text", True, CODEX_TEXT), ("tool_image", True, CODEX_IMAGE),
    ("tool_failed", False, CODEX_FAILED),
])
def test_codex_real_receipt_confirms_its_result_once(
        case: str, success: bool, content: list[dict[str, Any]]) -> None:
    call = the_call("codex", case)
    assert (call.name, bool(call.thread_id), bool(call.turn_id)) == ("get_weather", True, True)
    assert rules.receipts(call, success, content, load("codex", case)) == 1


@pytest.mark.parametrize(("case", "success", "content", "name"), [
    ("tool_text", True, [t("sunny, 21 C!")], "get_weather"),  # text
    ("tool_text", False, CODEX_TEXT, "get_weather"),  # success flag / status
    ("tool_text", True, CODEX_TEXT, "other_tool"),  # function name
    ("tool_image", True, [CODEX_IMAGE[0], CODEX_IMAGE[2], CODEX_IMAGE[1]], "get_weather"),
    ("tool_image", True, CODEX_IMAGE[:2], "get_weather"),  # count
    ("tool_image", True, [CODEX_IMAGE[0], {"type": "input_image", "image_url": PNG + "A"},
                          CODEX_IMAGE[2]], "get_weather"),  # the image's bytes
    ("tool_failed", True, CODEX_FAILED, "get_weather"),
])
def test_codex_real_receipt_confirms_no_other_result(
        case: str, success: bool, content: list[dict[str, Any]], name: str) -> None:
    call = the_call("codex", case)
    call = rules.Announced("codex", call.call_id, name, call.thread_id, call.turn_id)
    assert rules.receipts(call, success, content, load("codex", case)) == 0


def test_codex_receipt_of_another_turn_or_thread_confirms_nothing() -> None:
    call = the_call("codex", "tool_text")
    for other in (rules.Announced("codex", call.call_id, call.name, call.thread_id, "other"),
                  rules.Announced("codex", call.call_id, call.name, "other", call.turn_id)):
        assert rules.receipts(other, True, CODEX_TEXT, load("codex", "tool_text")) == 0


def test_codex_an_unanswered_call_given_up_is_never_a_receipt() -> None:
    call = the_call("codex", "unanswered")
    for success, content in ((False, []), (True, []), (True, CODEX_TEXT),
                             (False, CODEX_FAILED)):
        assert rules.receipts(call, success, content, load("codex", "unanswered")) == 0


def test_codex_a_receipt_printed_twice_is_counted_twice_and_a_synthesized_one_never() -> None:
    recs = load("codex", "tool_text")
    call = the_call("codex", "tool_text")
    [rec] = [r for r in recs if rules.confirms(call, True, CODEX_TEXT, r)]
    again = json.loads(json.dumps(rec))
    again["emittedAtMs"] = rec.get("emittedAtMs", 0) + 1  # another record, the same receipt
    assert rules.receipts(call, True, CODEX_TEXT, [*recs, again]) == 2
    assert rules.receipts(call, True, CODEX_TEXT, [*recs, rec]) == 1  # the same record twice
    assert not rules.confirms(call, True, CODEX_TEXT, {**rec, "synthesized": True})
    # the success flag itself, beside the status: a bool equal to the result's
    for flag in (False, "true", None):
        odd = json.loads(json.dumps(rec))
        odd["params"]["item"]["success"] = flag
        assert not rules.confirms(call, True, CODEX_TEXT, odd)


@pytest.mark.parametrize(("case", "state"), [
    ("plain_text", "completed"), ("tool_text", "completed"), ("tool_image", "completed"),
    ("tool_failed", "completed"), ("steer", "completed"), ("unanswered", "failed"),
])
def test_codex_turn_end_as_printed(case: str, state: str) -> None:
    ends = [e for r in load("codex", case)
            if (e := rules.turn_end("codex", {"native": r})) is not None]
    assert ends == [state]


def test_codex_no_call_announced_without_a_dynamic_tool() -> None:
    assert rules.announced("codex", load("codex", "plain_text")) == {}
    assert rules.announced("codex", load("codex", "steer")) == {}


# ------------------------------------------------------------------------------ claude

def claude_image() -> dict[str, Any]:
    rec = next(r for r in load("claude_code", "tool_result_image") if r["type"] == "user"
               and any(b.get("type") == "tool_result" for b in r["message"]["content"]))
    data = rec["message"]["content"][0]["content"][1]["source"]["data"]
    return {"type": "input_image", "image_url": f"data:image/png;base64,{data}"}


@pytest.mark.parametrize(("case", "success", "content"), [
    ("tool_call_text_result", True, [t("sunny, 21 C")]),
    ("tool_result_image", True, "IMAGE"),
    ("tool_result_error", False, [t("partial: none"), t("no such city")]),
    # the binary prints a one-block failed result as the two-block one (docs/receipts.md)
    ("tool_result_error_one_block", False, [t("partial: none\nno such city")]),
    ("tool_result_error_one_block", False, [t("partial: none"), t("no such city")]),
])
def test_claude_real_receipt_confirms_its_result_once(case: str, success: bool,
                                                      content: Any) -> None:
    content = [t("map:"), claude_image()] if content == "IMAGE" else content
    call = the_call("claude_code", case)
    assert call.name == "get_weather" and call.native_session_id
    assert rules.receipts(call, success, content, load("claude_code", case)) == 1


@pytest.mark.parametrize(("case", "success", "content"), [
    ("tool_call_text_result", True, [t("sunny, 21 C ")]),  # exact text
    ("tool_call_text_result", False, [t("sunny, 21 C")]),  # the flag
    ("tool_call_text_result", True, [t("sunny, 21 C"), t("more")]),  # count
    ("tool_result_image", True, "SWAPPED"),  # order
    ("tool_result_image", True, [t("map:")]),  # no image at the image's position
    ("tool_result_error", True, [t("partial: none"), t("no such city")]),
    ("tool_result_error", False, [t("partial: none no such city")]),
    ("tool_result_error", False, [t("no such city")]),
])
def test_claude_real_receipt_confirms_no_other_result(case: str, success: bool,
                                                      content: Any) -> None:
    content = [claude_image(), t("map:")] if content == "SWAPPED" else content
    call = the_call("claude_code", case)
    assert rules.receipts(call, success, content, load("claude_code", case)) == 0


def test_claude_receipt_of_another_native_session_confirms_nothing() -> None:
    call = the_call("claude_code", "tool_call_text_result")
    other = rules.Announced("claude_code", call.call_id, call.name, native_session_id="x")
    assert rules.receipts(other, True, [t("sunny, 21 C")],
                          load("claude_code", "tool_call_text_result")) == 0


def test_claude_replayed_and_synthetic_records_never_confirm() -> None:
    recs = load("claude_code", "tool_call_text_result")
    call = the_call("claude_code", "tool_call_text_result")
    [rec] = [r for r in recs if rules.confirms(call, True, [t("sunny, 21 C")], r)]
    for flag in ({"isReplay": True}, {"isSynthetic": True}, {"synthesized": True}):
        assert not rules.confirms(call, True, [t("sunny, 21 C")], {**rec, **flag})
    replays = [r for f in (DATA / "claude_code").glob("*.jsonl")
               for r in load("claude_code", f.stem) if r.get("isReplay") is True]
    assert replays and all(rules._announcements("claude_code", r) == [] for r in replays)


def test_claude_subagent_call_is_not_public_and_its_result_never_confirms() -> None:
    recs = load("claude_code", "subagent")
    sub = next(r for r in recs if r["type"] == "assistant" and r["parent_tool_use_id"]
               and r["message"]["content"][0]["type"] == "tool_use")
    # the root's only call is the built-in Agent; the subagent's call is announced nowhere
    assert [c.name for c in rules.announced("claude_code", recs).values()] == ["Agent"]
    assert rules.announced("claude_code", recs, {sub["message"]["content"][0]["id"]}) == {}
    call = rules.Announced("claude_code", sub["message"]["content"][0]["id"], "get_weather",
                           native_session_id=sub["session_id"])
    assert rules.receipts(call, True, [t("sunny, 21 C")], recs) == 0
    # the parent link alone keeps it from confirming
    root = [{**r, "parent_tool_use_id": None} for r in recs]
    assert rules.receipts(call, True, [t("sunny, 21 C")], root) == 1


@pytest.mark.parametrize("case", sorted(p.stem for p in (DATA / "claude_code").glob("*.jsonl")))
def test_claude_turn_end_as_printed(case: str) -> None:
    ends = [e for r in load("claude_code", case)
            if (e := rules.turn_end("claude_code", {"native": r})) is not None]
    assert ends and set(ends) == {"completed"}
    assert rules.turn_end("claude_code", {"native": {"type": "result", "subtype": "success"},
                                          "native_turn_continues": True}) is None
    assert rules.turn_end("claude_code", {"native": {
        "type": "result", "subtype": "error_during_execution", "is_error": True}}) == "failed"

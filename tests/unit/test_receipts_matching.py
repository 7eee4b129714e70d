"""Exact native confirmation, per harness (shared/domain/receipts.py). Every row changes one
field of a matching observation and must not confirm; the reason names that field."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from shared.domain.receipts import (
    Confirmed,
    NotAMatch,
    Released,
    expect,
    match_native,
    match_observation,
)
from tests.support.builders import image as i
from tests.support.builders import text as t

PNG = "data:image/png;base64,iVBORw0KGgo="
JPG = "data:image/jpeg;base64,/9j/4AAQ"
CORE_SESSION = "session_" + "1" * 32

Mut = Callable[[dict[str, Any]], object]


# ============================================================================ Claude Code

CLAUDE = expect(
    harness="claude_code",
    session_id=CORE_SESSION,
    call_id="toolu_1",
    name="lookup",
    success=True,
    content=[t("a"), i(PNG), t("b")],
    native_session_id="ns_1",
)


def claude_record() -> dict[str, Any]:
    return {
        "type": "user",
        "uuid": "u-1",
        "session_id": "ns_1",
        "parent_tool_use_id": None,
        "isReplay": False,
        "isSynthetic": False,
        "message": {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "is_error": False,
                    "content": [
                        {"type": "text", "text": "a"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": "iVBORw0KGgo=",
                            },
                        },
                        {"type": "text", "text": "b"},
                    ],
                }
            ],
        },
    }


def replace_with(**new: Any) -> Mut:
    def f(r: dict[str, Any]) -> None:
        r.clear()
        r.update(new)

    return f


def block(r: dict[str, Any]) -> dict[str, Any]:
    b: dict[str, Any] = r["message"]["content"][0]
    return b


def blocks(r: dict[str, Any]) -> list[dict[str, Any]]:
    c: list[dict[str, Any]] = block(r)["content"]
    return c


def setk(key: str, value: Any) -> Mut:
    def f(r: dict[str, Any]) -> None:
        r[key] = value

    return f


def setb(key: str, value: Any) -> Mut:
    def f(r: dict[str, Any]) -> None:
        block(r)[key] = value

    return f


CLAUDE_MISMATCH: list[tuple[str, Mut, str]] = [
    ("type assistant", setk("type", "assistant"), "type"),
    ("type result", setk("type", "result"), "type"),
    ("replayed", setk("isReplay", True), "isReplay"),
    ("replayed truthy non-bool", setk("isReplay", 1), "isReplay"),
    ("synthetic", setk("isSynthetic", True), "isSynthetic"),
    ("subagent", setk("parent_tool_use_id", "toolu_0"), "parent_tool_use_id"),
    ("other native session", setk("session_id", "ns_2"), "session_id"),
    ("native session missing", lambda r: r.pop("session_id"), "session_id"),
    ("other call id", setb("tool_use_id", "toolu_2"), "tool_use_id"),
    ("is_error flipped", setb("is_error", True), "is_error"),
    ("is_error not a bool", setb("is_error", 0), "is_error"),
    ("text differs", lambda r: blocks(r)[0].update(text="A"), "content[0].text"),
    ("text trailing space", lambda r: blocks(r)[2].update(text="b "), "content[2].text"),
    ("text trimmed", lambda r: blocks(r)[0].update(text=""), "content[0].text"),
    (
        "image position holds text",
        lambda r: blocks(r).__setitem__(1, {"type": "text", "text": ""}),
        "content[1].type",
    ),
    (
        "text position holds image",
        lambda r: blocks(r).__setitem__(0, copy.deepcopy(blocks(r)[1])),
        "content[0].type",
    ),
    ("extra block", lambda r: blocks(r).append({"type": "text", "text": "c"}), "content.count"),
    ("missing block", lambda r: blocks(r).pop(), "content.count"),
    ("image dropped", lambda r: blocks(r).pop(1), "content.count"),
    ("order swapped", lambda r: blocks(r).reverse(), "content[0].text"),
    (
        "image and text swapped",
        lambda r: blocks(r).__setitem__(slice(0, 2), [blocks(r)[1], blocks(r)[0]]),
        "content[0].type",
    ),
    ("content as a string", setb("content", "ab"), "content"),
    ("no message content", lambda r: r["message"].pop("content"), "message.content"),
    (
        "tool_result twice",
        lambda r: r["message"]["content"].append(copy.deepcopy(block(r))),
        "tool_use_id",
    ),
    ("tool_result block renamed", setb("type", "tool_use"), "tool_use_id"),
    (
        "a release for another call",
        replace_with(type="tool_release", session_id="ns_1", tool_use_id="toolu_2"),
        "tool_use_id",
    ),
    (
        "a release in another session",
        replace_with(type="tool_release", session_id="ns_2", tool_use_id="toolu_1"),
        "session_id",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "field"), [c[1:] for c in CLAUDE_MISMATCH], ids=[c[0] for c in CLAUDE_MISMATCH]
)
def test_claude_one_field_differs(mutate: Mut, field: str) -> None:
    record = claude_record()
    assert match_native(CLAUDE, record) == Confirmed()  # the baseline matches
    mutate(record)
    verdict = match_native(CLAUDE, record)
    assert isinstance(verdict, NotAMatch)
    assert verdict.field == field
    assert field in verdict.reason


CLAUDE_MATCH: list[tuple[str, Mut]] = [
    ("baseline", lambda r: None),
    ("isReplay absent", lambda r: r.pop("isReplay")),
    ("isSynthetic absent", lambda r: r.pop("isSynthetic")),
    ("parent_tool_use_id absent", lambda r: r.pop("parent_tool_use_id")),
    ("is_error absent means false", lambda r: block(r).pop("is_error")),
    (
        "image re-encoded by the harness",
        lambda r: blocks(r)[1].update(
            source={"type": "base64", "media_type": "image/jpeg", "data": "/9j/resized"}
        ),
    ),
    (
        "other tool results beside it",
        lambda r: r["message"]["content"].insert(
            0, {"type": "tool_result", "tool_use_id": "toolu_9", "is_error": True, "content": []}
        ),
    ),
]


@pytest.mark.parametrize("mutate", [c[1] for c in CLAUDE_MATCH], ids=[c[0] for c in CLAUDE_MATCH])
def test_claude_confirms(mutate: Mut) -> None:
    record = claude_record()
    mutate(record)
    assert match_native(CLAUDE, record) == Confirmed()


def test_claude_failed_result() -> None:
    expected = expect(
        harness="claude_code",
        session_id=CORE_SESSION,
        call_id="toolu_1",
        name="lookup",
        success=False,
        content=[t("out"), t("boom")],
        native_session_id="ns_1",
    )
    record = claude_record()
    block(record).update(
        is_error=True, content=[{"type": "text", "text": "out"}, {"type": "text", "text": "boom"}]
    )
    assert match_native(expected, record) == Confirmed()
    block(record).pop("is_error")  # absent = false ≠ failed
    assert isinstance(match_native(expected, record), NotAMatch)


def test_claude_without_recorded_native_session_never_confirms() -> None:
    expected = expect(
        harness="claude_code",
        session_id=CORE_SESSION,
        call_id="toolu_1",
        name="lookup",
        success=True,
        content=[t("a"), i(PNG), t("b")],
    )
    record = claude_record()
    record["session_id"] = None
    v = match_native(expected, record)
    assert isinstance(v, NotAMatch) and v.field == "session_id"


def test_claude_release() -> None:
    rel = {"type": "tool_release", "session_id": "ns_1", "tool_use_id": "toolu_1"}
    assert match_native(CLAUDE, rel) == Released()


def test_claude_function_call_record_never_confirms() -> None:
    call = {
        "type": "assistant",
        "uuid": "u",
        "session_id": "ns_1",
        "parent_tool_use_id": None,
        "message": {
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {}}]
        },
    }
    assert isinstance(match_native(CLAUDE, call), NotAMatch)


# ============================================================================ Codex

CODEX = expect(
    harness="codex",
    session_id=CORE_SESSION,
    call_id="call_1",
    name="lookup",
    success=True,
    content=[t("a"), i(PNG), t("err")],
    thread_id="th_1",
    turn_id="tu_1",
)


def codex_record() -> dict[str, Any]:
    return {
        "method": "item/completed",
        "params": {
            "threadId": "th_1",
            "turnId": "tu_1",
            "item": {
                "type": "dynamicToolCall",
                "id": "call_1",
                "tool": "lookup",
                "status": "completed",
                "success": True,
                "contentItems": [
                    {"type": "inputText", "text": "a"},
                    {"type": "inputImage", "imageUrl": PNG},
                    {"type": "inputText", "text": "err"},
                ],
            },
        },
    }


def item(r: dict[str, Any]) -> dict[str, Any]:
    it: dict[str, Any] = r["params"]["item"]
    return it


def items(r: dict[str, Any]) -> list[dict[str, Any]]:
    c: list[dict[str, Any]] = item(r)["contentItems"]
    return c


def setp(key: str, value: Any) -> Mut:
    def f(r: dict[str, Any]) -> None:
        r["params"][key] = value

    return f


def seti(key: str, value: Any) -> Mut:
    def f(r: dict[str, Any]) -> None:
        item(r)[key] = value

    return f


CODEX_MISMATCH: list[tuple[str, Mut, str]] = [
    ("item/started (a delivery alone)", setk("method", "item/started"), "method"),
    ("turn/completed", setk("method", "turn/completed"), "method"),
    ("other item type", seti("type", "mcpToolCall"), "item.type"),
    ("other thread", setp("threadId", "th_2"), "threadId"),
    ("other turn", setp("turnId", "tu_2"), "turnId"),
    ("other call id", seti("id", "call_2"), "item.id"),
    ("other function name", seti("tool", "lookup2"), "item.tool"),
    ("status failed", seti("status", "failed"), "item.status"),
    ("status inProgress", seti("status", "inProgress"), "item.status"),
    ("success flipped", seti("success", False), "item.success"),
    ("success missing", lambda r: item(r).pop("success"), "item.success"),
    ("success not a bool", seti("success", 1), "item.success"),
    ("text differs", lambda r: items(r)[0].update(text="A"), "contentItems[0].text"),
    ("text with newline", lambda r: items(r)[2].update(text="err\n"), "contentItems[2].text"),
    ("image url differs", lambda r: items(r)[1].update(imageUrl=JPG), "contentItems[1].imageUrl"),
    (
        "image as text",
        lambda r: items(r).__setitem__(1, {"type": "inputText", "text": PNG}),
        "contentItems[1].type",
    ),
    ("order swapped", lambda r: items(r).reverse(), "contentItems[0].text"),
    (
        "image first",
        lambda r: items(r).__setitem__(slice(0, 2), [items(r)[1], items(r)[0]]),
        "contentItems[0].type",
    ),
    (
        "extra item",
        lambda r: items(r).append({"type": "inputText", "text": ""}),
        "contentItems.count",
    ),
    ("missing item", lambda r: items(r).pop(), "contentItems.count"),
    ("no contentItems", lambda r: item(r).pop("contentItems"), "contentItems"),
    (
        "a release for another call",
        lambda r: r.update(
            method="item/released",
            params={"threadId": "th_1", "turnId": "tu_1", "callId": "call_2"},
        ),
        "callId",
    ),
    (
        "a release in another turn",
        lambda r: r.update(
            method="item/released",
            params={"threadId": "th_1", "turnId": "tu_2", "callId": "call_1"},
        ),
        "turnId",
    ),
    (
        "a release in another thread",
        lambda r: r.update(
            method="item/released",
            params={"threadId": "th_2", "turnId": "tu_1", "callId": "call_1"},
        ),
        "threadId",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "field"), [c[1:] for c in CODEX_MISMATCH], ids=[c[0] for c in CODEX_MISMATCH]
)
def test_codex_one_field_differs(mutate: Mut, field: str) -> None:
    record = codex_record()
    assert match_native(CODEX, record) == Confirmed()
    mutate(record)
    verdict = match_native(CODEX, record)
    assert isinstance(verdict, NotAMatch)
    assert verdict.field == field
    assert field in verdict.reason


def test_codex_failed_result() -> None:
    expected = expect(
        harness="codex",
        session_id=CORE_SESSION,
        call_id="call_1",
        name="lookup",
        success=False,
        content=[t("boom")],
        thread_id="th_1",
        turn_id="tu_1",
    )
    record = codex_record()
    item(record).update(
        status="failed", success=False, contentItems=[{"type": "inputText", "text": "boom"}]
    )
    assert match_native(expected, record) == Confirmed()
    item(record)["status"] = "completed"
    v = match_native(expected, record)
    assert isinstance(v, NotAMatch) and v.field == "item.status"


def test_codex_extra_fields_ignored() -> None:
    record = codex_record()
    item(record)["durationMs"] = 12
    item(record)["arguments"] = {"q": 1}
    assert match_native(CODEX, record) == Confirmed()


def test_codex_release() -> None:
    rel = {
        "method": "item/released",
        "params": {"threadId": "th_1", "turnId": "tu_1", "callId": "call_1"},
    }
    assert match_native(CODEX, rel) == Released()


def test_codex_without_recorded_thread_never_confirms() -> None:
    expected = expect(
        harness="codex",
        session_id=CORE_SESSION,
        call_id="call_1",
        name="lookup",
        success=True,
        content=[t("a"), i(PNG), t("err")],
    )
    record = codex_record()
    record["params"]["threadId"] = None
    record["params"]["turnId"] = None
    assert isinstance(match_native(expected, record), NotAMatch)


# ============================================================================ envelope


def envelope(native: dict[str, Any], **over: Any) -> dict[str, Any]:
    return {
        "schema": "runtime.observation/1",
        "runtime_id": "rt_" + "a" * 32,
        "session_id": CORE_SESSION,
        "harness": "codex",
        "observed_at": "2025-01-01T00:00:00Z",
        "native": native,
        **over,
    }


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"schema": "runtime.observation/2"}, "schema"),
        ({"session_id": "session_" + "2" * 32}, "session"),
        ({"harness": "claude_code"}, "harness"),
        ({"native": "x"}, "native"),
    ],
)
def test_envelope_mismatch(over: dict[str, Any], field: str) -> None:
    assert match_observation(CODEX, envelope(codex_record())) == Confirmed()
    v = match_observation(CODEX, {**envelope(codex_record()), **over})
    assert isinstance(v, NotAMatch) and v.field == field


def test_envelope_claude() -> None:
    env = envelope(claude_record(), harness="claude_code")
    assert match_observation(CLAUDE, env) == Confirmed()


def test_unknown_harness_never_confirms() -> None:
    expected = expect(
        harness="minimax_code",
        session_id=CORE_SESSION,
        call_id="c",
        name="n",
        success=True,
        content=[],
    )
    assert isinstance(match_native(expected, codex_record()), NotAMatch)


def test_matching_does_not_mutate() -> None:
    record = claude_record()
    before = copy.deepcopy(record)
    match_native(CLAUDE, record)
    assert record == before


def test_large_image_kept_as_digest_and_compared_exactly() -> None:
    big = "data:image/png;base64," + "A" * 5_000_000
    expected = expect(
        harness="codex",
        session_id=CORE_SESSION,
        call_id="call_1",
        name="lookup",
        success=True,
        content=[i(big)],
        thread_id="th_1",
        turn_id="tu_1",
    )
    assert all(len(key) == 16 for _, key in expected.content)  # no image bytes held
    record = codex_record()
    item(record)["contentItems"] = [{"type": "inputImage", "imageUrl": big}]
    assert match_native(expected, record) == Confirmed()
    item(record)["contentItems"] = [{"type": "inputImage", "imageUrl": big[:-1] + "B"}]
    v = match_native(expected, record)
    assert isinstance(v, NotAMatch) and v.field == "contentItems[0].imageUrl"
    item(record)["contentItems"] = [{"type": "inputImage", "imageUrl": None}]
    assert isinstance(match_native(expected, record), NotAMatch)


def test_non_string_text_never_confirms() -> None:
    record = claude_record()
    blocks(record)[0]["text"] = None
    v = match_native(CLAUDE, record)
    assert isinstance(v, NotAMatch) and v.field == "content[0].text"

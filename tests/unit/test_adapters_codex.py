"""Codex native encoding (shared/domain/harnesses/codex.py): byte-for-byte expectations."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from shared.domain.harnesses import adapter_for, codex, is_terminal
from shared.domain.harnesses.errors import UnsupportedContent
from tests.support.builders import Json
from tests.support.builders import image as i
from tests.support.builders import msg as user_msg
from tests.support.builders import text as t

PNG = "data:image/png;base64,iVBORw0KGgo="
JPG = "data:image/jpeg;base64,/9j/4AAQ"


def msg(*parts: Json) -> Json:
    """A message with ``"type": "message"``, as the Responses API writes it."""
    return user_msg(*parts, type="message")


SEP = {"type": "text", "text": "\n\n"}

FLATTEN: list[tuple[str, list[dict[str, Any]], list[dict[str, str]]]] = [
    ("one text message", [msg(t("hello"))], [{"type": "text", "text": "hello"}]),
    (
        "two messages get one blank-line separator",
        [msg(t("a")), msg(t("b"))],
        [{"type": "text", "text": "a"}, SEP, {"type": "text", "text": "b"}],
    ),
    (
        "three messages",
        [msg(t("a")), msg(t("b")), msg(t("c"))],
        [
            {"type": "text", "text": "a"},
            SEP,
            {"type": "text", "text": "b"},
            SEP,
            {"type": "text", "text": "c"},
        ],
    ),
    (
        "parts within a message are not merged or separated",
        [msg(t("a"), t("b"))],
        [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    ),
    (
        "image passes as native image input, url unchanged",
        [msg(t("look"), i(PNG))],
        [{"type": "text", "text": "look"}, {"type": "image", "url": PNG}],
    ),
    (
        "image-only messages still separated",
        [msg(i(PNG)), msg(i(JPG))],
        [{"type": "image", "url": PNG}, SEP, {"type": "image", "url": JPG}],
    ),
    (
        "whitespace-only and empty text delivered unchanged",
        [msg(t(" \t")), msg(t(""), t("x"))],
        [
            {"type": "text", "text": " \t"},
            SEP,
            {"type": "text", "text": ""},
            {"type": "text", "text": "x"},
        ],
    ),
    (
        "trailing newlines are not trimmed",
        [msg(t("a\n")), msg(t("\nb"))],
        [{"type": "text", "text": "a\n"}, SEP, {"type": "text", "text": "\nb"}],
    ),
    ("empty batch", [], []),
]


@pytest.mark.parametrize(
    ("messages", "expected"), [c[1:] for c in FLATTEN], ids=[c[0] for c in FLATTEN]
)
def test_flatten_byte_for_byte(
    messages: list[dict[str, Any]], expected: list[dict[str, str]]
) -> None:
    before = copy.deepcopy(messages)
    got = codex.flatten_messages(messages)
    assert got == expected
    # byte for byte, key order included
    assert json.dumps(got, ensure_ascii=False) == json.dumps(expected, ensure_ascii=False)
    assert messages == before


def test_flatten_serialised_bytes() -> None:
    got = codex.flatten_messages([msg(t("a"), i(PNG)), msg(t("b"))])
    assert json.dumps(got, separators=(",", ":")) == (
        '[{"type":"text","text":"a"},{"type":"image","url":"data:image/png;base64,iVBORw0KGgo="},'
        '{"type":"text","text":"\\n\\n"},{"type":"text","text":"b"}]'
    )


def test_flatten_text_concatenation_shows_blank_line() -> None:
    got = codex.flatten_messages([msg(t("first")), msg(t("second"))])
    assert isinstance(got, list)
    assert "".join(x["text"] for x in got) == "first\n\nsecond"


def test_flatten_unknown_part_is_terminal_error_not_dropped() -> None:
    got = codex.flatten_messages([msg(t("a")), msg({"type": "input_file", "file_id": "f"})])
    assert isinstance(got, UnsupportedContent)
    assert got.param == "messages[1].content[0]"
    assert is_terminal(got)


CONTENT_ITEMS: list[tuple[str, list[dict[str, str]], list[dict[str, str]]]] = [
    ("empty", [], []),
    ("text", [t("ok")], [{"type": "inputText", "text": "ok"}]),
    (
        "ordered text and images",
        [i(PNG), t("caption"), i(JPG), t("err")],
        [
            {"type": "inputImage", "imageUrl": PNG},
            {"type": "inputText", "text": "caption"},
            {"type": "inputImage", "imageUrl": JPG},
            {"type": "inputText", "text": "err"},
        ],
    ),
    ("empty text kept", [t("")], [{"type": "inputText", "text": ""}]),
]


@pytest.mark.parametrize(
    ("content", "expected"), [c[1:] for c in CONTENT_ITEMS], ids=[c[0] for c in CONTENT_ITEMS]
)
def test_content_items(content: list[dict[str, str]], expected: list[dict[str, str]]) -> None:
    assert codex.content_items(content) == expected
    assert codex.function_result_response(False, content) == {
        "contentItems": expected,
        "success": False,
    }


def test_expected_status() -> None:
    assert codex.expected_status(True) == "completed"
    assert codex.expected_status(False) == "failed"


def test_function_call_from_item_started() -> None:
    native: dict[str, Any] = {
        "method": "item/started",
        "params": {
            "threadId": "th_1",
            "turnId": "tu_1",
            "item": {
                "type": "dynamicToolCall",
                "id": "call_1",
                "tool": "lookup",
                "arguments": {"q": 1},
            },
        },
    }
    call = codex.function_call(native)
    assert call == codex.CodexCall("th_1", "tu_1", "call_1", "lookup", {"q": 1})
    for bad in (
        {**native, "method": "item/completed"},
        {
            "method": "item/started",
            "params": {**native["params"], "item": {"type": "commandExecution"}},
        },
        {
            "method": "item/started",
            "params": {"threadId": "th_1", "item": native["params"]["item"]},
        },
    ):
        assert codex.function_call(bad) is None


def test_registry() -> None:
    a = adapter_for("codex")
    assert a.harness == "codex" and a.text_only is False
    assert a.encode_messages([msg(t("a")), msg(t("b"))]) == [
        {"type": "text", "text": "a"},
        SEP,
        {"type": "text", "text": "b"},
    ]
    assert a.encode_function_result("c", True, [t("x")]) == {
        "contentItems": [{"type": "inputText", "text": "x"}],
        "success": True,
    }
    with pytest.raises(KeyError):
        adapter_for("gemini")

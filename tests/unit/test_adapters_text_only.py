"""The text-only adapter (MiniMax Code): images are refused terminally, never dropped."""

from __future__ import annotations

from typing import Any

import pytest

from shared.domain.harnesses import adapter_for, is_terminal
from shared.domain.harnesses import minimax_code as text_only
from shared.domain.harnesses.errors import AdapterError, TurnBoundExceeded, UnsupportedContent
from tests.support.builders import msg

PNG = "data:image/png;base64,iVBORw0KGgo="


def test_text_messages_encode_in_order() -> None:
    got = text_only.encode_messages(
        [
            msg({"type": "input_text", "text": "a"}, {"type": "input_text", "text": " b"}),
            msg({"type": "input_text", "text": "c"}),
        ]
    )
    assert got == ["a b", "c"]


@pytest.mark.parametrize(
    ("messages", "param"),
    [
        ([msg({"type": "input_image", "image_url": PNG})], "messages[0].content[0]"),
        (
            [msg({"type": "input_text", "text": "see"}, {"type": "input_image", "image_url": PNG})],
            "messages[0].content[1]",
        ),
        (
            [
                msg({"type": "input_text", "text": "a"}),
                msg({"type": "input_text", "text": "b"}, {"type": "input_image", "image_url": PNG}),
            ],
            "messages[1].content[1]",
        ),
    ],
)
def test_images_rejected_terminally(messages: list[dict[str, Any]], param: str) -> None:
    got = text_only.encode_messages(messages)
    # an error value, not a list with the image silently removed
    assert isinstance(got, UnsupportedContent)
    assert got.code == "unsupported_content"
    assert got.param == param
    assert got.terminal is True
    assert is_terminal(got) is True
    assert text_only.is_terminal(got) is True


def test_function_results_refused_terminally() -> None:
    got = text_only.encode_function_result("call_1", True, [{"type": "input_text", "text": "x"}])
    assert isinstance(got, UnsupportedContent) and is_terminal(got)


def test_registry_text_only() -> None:
    a = adapter_for("minimax_code")
    assert a.text_only is True
    err = a.encode_messages([msg({"type": "input_image", "image_url": PNG})])
    assert isinstance(err, AdapterError) and is_terminal(err)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (UnsupportedContent(message="x"), True),
        (TurnBoundExceeded(message="x"), True),
        (AdapterError(code="transient", message="x", terminal=False), False),
        (ValueError("x"), False),
        (None, False),
    ],
)
def test_is_terminal(value: object, expected: bool) -> None:
    assert is_terminal(value) is expected

"""The Claude bridge refuses a message with no image and no non-whitespace text, with the same
whitespace set as admission (primary spec, "Whitespace-only text": "Whitespace is the union of Go
unicode.IsSpace and ECMAScript String.prototype.trim, for example U+0085 and U+FEFF; Core
admission and the Claude bridge use the same set").

Every character of ``shared.domain.whitespace.WHITESPACE`` is tried alone, repeated, beside an
empty part and in a later message of the batch; characters outside the set that Python counts
as space (U+001C..U+001F) or that left Zs (U+180E) are not whitespace for the bridge either.
"""

from __future__ import annotations

import pytest

from services.admission.domain.validation import Limits, validate_create
from shared.domain.errors import ApiError
from shared.domain.harnesses import adapter_for, is_terminal
from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses.claude_code import ClaudeTurn
from shared.domain.harnesses.errors import UnsupportedContent
from shared.domain.whitespace import WHITESPACE
from tests.support.builders import msg
from tests.support.builders import text as t

PNG = "data:image/png;base64,iVBORw0KGgo="
CHARS = sorted(WHITESPACE)
IDS = [f"U+{ord(c):04X}" for c in CHARS]
NOT_IN_SET = ["\x1c", "\x1d", "\x1e", "\x1f", "\u180e", "\u200b", "x"]


def test_the_set_is_the_specs_examples_and_more() -> None:
    assert {"\u0085", "\ufeff", " ", "\n", "\t"} <= WHITESPACE and len(CHARS) == 26


@pytest.mark.parametrize("ch", CHARS, ids=IDS)
def test_whitespace_only_message_is_refused_by_the_bridge(ch: str) -> None:
    for messages in (
        [msg(t(ch))],
        [msg(t(ch * 3), t(""))],
        [msg(t("hello")), msg(t(ch), t(ch))],  # the second message of a batch
    ):
        got = claude.encode_messages(messages)
        assert isinstance(got, UnsupportedContent) and is_terminal(got), (ch, got)
        bad = len(messages) - 1
        assert got.param == f"messages[{bad}].content"
        assert isinstance(adapter_for("claude_code").encode_messages(messages), UnsupportedContent)
    # a steering batch is refused as a whole; nothing is recorded and the Turn goes on
    turn = ClaudeTurn()
    assert isinstance(turn.open("b1", [msg(t("go"))]), list)
    assert isinstance(turn.steer("b2", [msg(t("ok")), msg(t(ch))]), UnsupportedContent)
    assert turn.user_messages == 1 and turn.running


@pytest.mark.parametrize("ch", CHARS, ids=IDS)
def test_whitespace_beside_text_or_an_image_goes_through(ch: str) -> None:
    for content in ([t(ch + "x" + ch)], [t(ch), t("x")], [t(ch), {"type": "input_image",
                                                                   "image_url": PNG}]):
        got = claude.encode_messages([msg(*content)])
        assert isinstance(got, list) and len(got) == 1, (ch, got)


@pytest.mark.parametrize("ch", NOT_IN_SET, ids=[f"U+{ord(c):04X}" for c in NOT_IN_SET])
def test_characters_outside_the_set_are_text_for_the_bridge(ch: str) -> None:
    got = claude.encode_messages([msg(t(ch))])
    assert isinstance(got, list) and got[0]["message"]["content"] == [{"type": "text", "text": ch}]


@pytest.mark.parametrize("ch", CHARS + NOT_IN_SET)
def test_bridge_and_admission_agree(ch: str) -> None:
    body = {"harness": "claude_code", "placement": "none", "input": [msg(t(ch))]}
    admitted = not isinstance(validate_create(body, Limits()), ApiError)
    bridged = isinstance(claude.encode_messages([msg(t(ch))]), list)
    assert admitted == bridged == (ch not in WHITESPACE)

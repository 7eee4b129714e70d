"""Every row of the primary spec's three harness tables, for every harness × placement × content
kind, over Session creation (plain and streaming), events.create and function results.

The expected tables below are typed out from the spec, independently of
``shared.domain.harness``, so a wrong profile fails here.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

from services.admission.domain.validation import (
    AdmittedCreate,
    AdmittedMessageEvent,
    AdmittedToolResult,
    Limits,
    validate_create,
    validate_event,
)
from shared.domain.errors import ApiError
from shared.domain.harness import CLAUDE_CODE, PROFILES
from shared.domain.harnesses import claude_code as claude
from tests.support.builders import (
    JPEG_URI,
    PNG_URI,
    assert_error,
    create_body,
    image,
    message_event,
    msg,
    text,
    tool_result,
)

HARNESSES = ["codex", "claude_code", "minimax_code"]
PLACEMENTS = ["none", "openai_hosted", "self_hosted"]
UNSUPPORTED = (400, "unsupported_or_invalid_configuration")

# | Harness | Message images |
SPEC_MESSAGE_IMAGES = {
    "codex": {"none": True, "openai_hosted": True, "self_hosted": True},
    "claude_code": {"none": True, "openai_hosted": True, "self_hosted": True},
    "minimax_code": {"none": False, "openai_hosted": False, "self_hosted": False},
}
# | Harness | A message with no image and no non-whitespace text |
SPEC_WHITESPACE_ONLY = {
    "codex": "admitted unchanged",
    "claude_code": UNSUPPORTED,
    "minimax_code": UNSUPPORTED,
}

# content kind → (parts, has image, whitespace-only, index of the first image part)
CONTENT_KINDS: dict[str, tuple[list[dict[str, Any]], bool, bool, int | None]] = {
    "text": ([text("hello")], False, False, None),
    "empty beside text": ([text(""), text("text")], False, False, None),
    "whitespace beside text": ([text("  "), text("x\n")], False, False, None),
    "text with inner whitespace": ([text("\u3000a\ufeff")], False, False, None),
    "space": ([text(" ")], False, True, None),
    "newline tab": ([text("\n\t")], False, True, None),
    "NEL (Go only)": ([text("\u0085")], False, True, None),
    "ZWNBSP (ECMAScript only)": ([text("\ufeff")], False, True, None),
    "whitespace over parts": ([text(" "), text("\u2028\u3000")], False, True, None),
    "empty and whitespace": ([text(""), text("\v")], False, True, None),
    "png": ([image(PNG_URI)], True, False, 0),
    "jpeg": ([image(JPEG_URI)], True, False, 0),
    "text then image": ([text("look"), image(PNG_URI)], True, False, 1),
    "whitespace then image": ([text(" "), text(""), image(JPEG_URI)], True, False, 2),
}

LEAD = msg(text("first message"))  # the kind under test is message [1], so params carry an index


def expected(harness: str, placement: str, kind: str) -> tuple[int, str, str] | None:
    _, has_image, ws_only, first_image = CONTENT_KINDS[kind]
    if has_image and not SPEC_MESSAGE_IMAGES[harness][placement]:
        return (*UNSUPPORTED, f"input[1].content[{first_image}]")
    if ws_only and SPEC_WHITESPACE_ONLY[harness] != "admitted unchanged":
        return (*UNSUPPORTED, "input[1].content")
    return None


CASES = list(itertools.product(HARNESSES, PLACEMENTS, CONTENT_KINDS))


def _check(result: object, exp: tuple[int, str, str] | None, sent: list[dict[str, Any]]) -> None:
    if exp is None:
        assert isinstance(result, AdmittedCreate | AdmittedMessageEvent), result
        assert result.input == sent  # admitted unchanged, whitespace included
        assert result.input is not sent
    else:
        assert_error(result, *exp)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("harness", "placement", "kind"), CASES)
def test_session_creation(harness: str, placement: str, kind: str, stream: bool) -> None:
    sent = [LEAD, msg(*CONTENT_KINDS[kind][0])]
    body = create_body(sent, harness, placement, stream=stream)
    _check(validate_create(body, Limits()), expected(harness, placement, kind), sent)


@pytest.mark.parametrize(("harness", "placement", "kind"), CASES)
def test_events_create(harness: str, placement: str, kind: str) -> None:
    sent = [LEAD, msg(*CONTENT_KINDS[kind][0])]
    result = validate_event(message_event(*sent), harness, placement, Limits())
    _check(result, expected(harness, placement, kind), sent)


@pytest.mark.parametrize("harness", HARNESSES)
@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("s", [" ", "\n\t", "\u0085", "\ufeff", "\u00a0\u2029"])
def test_whitespace_only_string_input(harness: str, placement: str, s: str) -> None:
    result = validate_create(create_body(s, harness, placement), Limits())
    if SPEC_WHITESPACE_ONLY[harness] == "admitted unchanged":
        assert isinstance(result, AdmittedCreate)
        assert result.input == [{"role": "user", "content": [{"type": "input_text", "text": s}]}]
    else:
        assert_error(result, *UNSUPPORTED, "input[0].content")


@pytest.mark.parametrize("harness", HARNESSES)
def test_shape_errors_come_before_the_profile(harness: str) -> None:
    # a MiniMax-unsupported image in message [0], a malformed message [1]: the 400 invalid wins
    body = create_body([msg(image()), msg(text("x"), extra=1)], harness)
    assert_error(validate_create(body, Limits()), 400, "invalid_request", "input[1].extra")
    # a corrupt image is invalid_request for every harness, MiniMax included
    bad = create_body([msg(image("data:image/png;base64,AAAA"))], harness)
    assert_error(
        validate_create(bad, Limits()), 400, "invalid_request", "input[0].content[0].image_url"
    )


# --- Function results ----------------------------------------------------------------------
# | Codex | Text and ordered text/image output; each part checked for form; images unchanged |
# | Claude Code | Text output. Images only in successful results, only inline PNG or JPEG;
#   an image in a failed result or a remote reference → 400 |
# | MiniMax Code | No public functions |

OUTPUTS: dict[str, tuple[dict[str, Any], int | None]] = {
    # kind → (result fields, index of the first image part in output)
    "no output": ({}, None),
    "null output": ({"output": None}, None),
    "string output": ({"output": "42"}, None),
    "empty string output": ({"output": ""}, None),
    "error only": ({"error": "boom"}, None),
    "null error": ({"error": None}, None),
    "output and error": ({"output": "partial", "error": "then failed"}, None),
    "text parts": ({"output": [text("a"), text("")]}, None),
    "png part": ({"output": [image(PNG_URI)]}, 0),
    "jpeg part": ({"output": [image(JPEG_URI)]}, 0),
    "text, image, text": ({"output": [text("see"), image(PNG_URI), text("ok")]}, 1),
    "image and error": ({"output": [image(JPEG_URI)], "error": "x"}, 0),
}


def expected_result(harness: str, success: bool, kind: str) -> tuple[int, str, str] | None:
    _, first_image = OUTPUTS[kind]
    if harness == "minimax_code":
        return (*UNSUPPORTED, "type")
    if harness == "claude_code" and first_image is not None and not success:
        return (*UNSUPPORTED, f"output[{first_image}]")
    return None


@pytest.mark.parametrize("success", [True, False])
@pytest.mark.parametrize(
    ("harness", "placement", "kind"), list(itertools.product(HARNESSES, PLACEMENTS, OUTPUTS))
)
def test_function_results(harness: str, placement: str, kind: str, success: bool) -> None:
    fields, _ = OUTPUTS[kind]
    body = tool_result(success, **fields)
    result = validate_event(body, harness, placement, Limits())
    exp = expected_result(harness, success, kind)
    if exp is not None:
        assert_error(result, *exp)
        return
    assert isinstance(result, AdmittedToolResult), result
    assert result.success is success
    assert result.fields_present == tuple(k for k in fields if k in ("output", "error"))
    assert result.output == fields.get("output")  # image references passed unchanged
    assert result.error == fields.get("error")
    assert result.has_images == (OUTPUTS[kind][1] is not None)


@pytest.mark.parametrize("harness", HARNESSES)
@pytest.mark.parametrize("success", [True, False])
@pytest.mark.parametrize(
    "url", ["https://example.com/a.png", "data:image/gif;base64,R0lGODlhAQABAAAAACw="]
)
def test_function_result_remote_or_other_image_is_400(
    harness: str, success: bool, url: str
) -> None:
    body = tool_result(success, output=[text("x"), image(url)])
    assert_error(
        validate_event(body, harness, "none", Limits()),
        400,
        "invalid_request",
        "output[1].image_url",
    )


# --- the rest of each profile as data ---------------------------------------------------------


def test_profiles_match_the_spec_tables() -> None:
    assert set(PROFILES) == set(HARNESSES)
    for h in HARNESSES:
        p = PROFILES[h]
        assert p.placements == frozenset(PLACEMENTS)
        assert dict(p.message_images) == SPEC_MESSAGE_IMAGES[h]
        assert (p.whitespace_only == "admit") == (SPEC_WHITESPACE_ONLY[h] == "admitted unchanged")
        assert p.text_only == (h == "minimax_code")
    assert PROFILES["claude_code"].bridge_protocols == frozenset({3})
    assert PROFILES["claude_code"].max_user_messages_per_turn == 64
    # the Claude adapter's own constants state the same facts
    assert claude.MAX_USER_MESSAGES_PER_TURN == CLAUDE_CODE.max_user_messages_per_turn
    assert CLAUDE_CODE.bridge_protocols == frozenset({claude.BRIDGE_PROTOCOL})
    assert PROFILES["codex"].bridge_protocols is None
    assert not PROFILES["minimax_code"].function_results.public_functions
    assert PROFILES["claude_code"].function_results.image_formats == {"png", "jpeg"}


@pytest.mark.parametrize("harness", HARNESSES)
def test_claude_64_user_message_bound(harness: str) -> None:
    for n in (64, 65):
        sent = [msg(text(f"m{i}")) for i in range(n)]
        created = validate_create(create_body(sent, harness), Limits())
        event = validate_event(message_event(*sent), harness, "none", Limits())
        for result in (created, event):
            if harness == "claude_code" and n == 65:
                assert_error(result, *UNSUPPORTED, "input[64]")
            else:
                assert not isinstance(result, ApiError), result


def test_a_placement_the_profile_lacks_is_unsupported() -> None:
    narrow = dataclasses.replace(CLAUDE_CODE, placements=frozenset({"none"}))
    profiles = {**PROFILES, "claude_code": narrow}
    body = create_body("hi", "claude_code", "self_hosted")
    assert_error(validate_create(body, Limits(), profiles), *UNSUPPORTED, "placement")
    ev = validate_event(
        message_event(msg(text("x"))), "claude_code", "openai_hosted", Limits(), profiles
    )
    assert_error(ev, *UNSUPPORTED, "placement")
    assert not isinstance(
        validate_create(create_body("hi", "claude_code"), Limits(), profiles), ApiError
    )


def test_result_rules_are_read_from_the_profile() -> None:
    rules = dataclasses.replace(
        CLAUDE_CODE.function_results, image_formats=frozenset({"png"}), text_output=False
    )
    profiles = {**PROFILES, "claude_code": dataclasses.replace(CLAUDE_CODE, function_results=rules)}
    jpeg = tool_result(True, output=[image(JPEG_URI)])
    assert_error(
        validate_event(jpeg, "claude_code", "none", Limits(), profiles), *UNSUPPORTED, "output[0]"
    )
    png = tool_result(True, output=[image(PNG_URI)])
    assert not isinstance(validate_event(png, "claude_code", "none", Limits(), profiles), ApiError)
    txt = tool_result(True, output="hi")
    assert_error(
        validate_event(txt, "claude_code", "none", Limits(), profiles), *UNSUPPORTED, "output"
    )


def test_unknown_session_harness_is_an_internal_error() -> None:
    result = validate_event(message_event(msg(text("x"))), "gpt_cli", "none", Limits())
    assert isinstance(result, ApiError) and result.status == 500

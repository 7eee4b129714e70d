"""Every bullet of the message rules and the create/event body fields: exact status, error.type
and param for each rejection; exact content for each admission."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.admission.domain.validation import (
    AdmittedCreate,
    AdmittedMessageEvent,
    Limits,
    check_body_size,
    validate_create,
    validate_event,
)
from shared.domain.errors import ApiError
from shared.settings import Settings
from tests.support.builders import (
    PNG_URI,
    assert_error,
    create_body,
    image,
    message_event,
    msg,
    text,
)

INVALID = (400, "invalid_request")


def create(input_: Any, **extra: Any) -> object:
    return validate_create(create_body(input_, **extra), Limits())


def event(body: object, harness: str = "codex", limits: Limits | None = None) -> object:
    return validate_event(body, harness, "none", limits or Limits())


# --- messages: each rule, over creation and events alike -----------------------------------

BAD_MESSAGES: dict[str, tuple[Any, str]] = {
    # name → (message, param relative to the message)
    "not an object (string)": ("hello", ""),
    "not an object (null)": (None, ""),
    "not an object (array)": ([text("x")], ""),
    "role missing": ({"content": [text("x")]}, ".role"),
    "role assistant": ({"role": "assistant", "content": [text("x")]}, ".role"),
    "role system": ({"role": "system", "content": [text("x")]}, ".role"),
    "role upper-case": ({"role": "User", "content": [text("x")]}, ".role"),
    "role null": ({"role": None, "content": [text("x")]}, ".role"),
    "type null": ({"role": "user", "type": None, "content": [text("x")]}, ".type"),
    "type empty": ({"role": "user", "type": "", "content": [text("x")]}, ".type"),
    "type other": ({"role": "user", "type": "input_text", "content": [text("x")]}, ".type"),
    "type upper-case": ({"role": "user", "type": "Message", "content": [text("x")]}, ".type"),
    "type true": ({"role": "user", "type": True, "content": [text("x")]}, ".type"),
    "content missing": ({"role": "user"}, ".content"),
    "content string": ({"role": "user", "content": "hello"}, ".content"),
    "content null": ({"role": "user", "content": None}, ".content"),
    "content object": ({"role": "user", "content": text("x")}, ".content"),
    "content empty": ({"role": "user", "content": []}, ".content"),
    "all text parts empty": (msg(text(""), text("")), ".content"),
    "one empty text part": (msg(text("")), ".content"),
    "unknown message field": (msg(text("x"), name="bob"), ".name"),
    "message id field": ({"id": "m1", "role": "user", "content": [text("x")]}, ".id"),
    "part not an object": (msg("hello"), ".content[0]"),
    "part null": (msg(text("x"), None), ".content[1]"),
    "part type missing": (msg({"text": "x"}), ".content[0].type"),
    "part type text (other vocabulary)": (msg({"type": "text", "text": "x"}), ".content[0].type"),
    "part type image": (msg({"type": "image", "image_url": PNG_URI}), ".content[0].type"),
    "part type input_file": (msg({"type": "input_file", "file_id": "f"}), ".content[0].type"),
    "part type null": (msg({"type": None, "text": "x"}), ".content[0].type"),
    "text missing": (msg({"type": "input_text"}), ".content[0].text"),
    "text number (no coercion)": (msg({"type": "input_text", "text": 1}), ".content[0].text"),
    "text null": (msg({"type": "input_text", "text": None}), ".content[0].text"),
    "text array": (msg({"type": "input_text", "text": ["x"]}), ".content[0].text"),
    "text bool": (msg({"type": "input_text", "text": True}), ".content[0].text"),
    "text lone surrogate": (msg(text("a\ud800b")), ".content[0].text"),
    "unknown text part field": (msg({**text("x"), "annotations": []}), ".content[0].annotations"),
    "image_url on a text part": (msg({**text("x"), "image_url": PNG_URI}), ".content[0].image_url"),
    "text on an image part": (msg({**image(), "text": "x"}), ".content[0].text"),
}


@pytest.mark.parametrize(("message", "rel"), BAD_MESSAGES.values(), ids=BAD_MESSAGES.keys())
def test_bad_message_in_creation(message: Any, rel: str) -> None:
    assert_error(create([msg(text("ok")), message]), *INVALID, f"input[1]{rel}")


@pytest.mark.parametrize(("message", "rel"), BAD_MESSAGES.values(), ids=BAD_MESSAGES.keys())
@pytest.mark.parametrize("harness", ["codex", "claude_code", "minimax_code"])
def test_bad_message_in_event(message: Any, rel: str, harness: str) -> None:
    assert_error(event(message_event(message), harness), *INVALID, f"input[0]{rel}")


GOOD_MESSAGES: dict[str, dict[str, Any]] = {
    "type omitted": msg(text("x")),
    "type message": msg(text("x"), type="message"),
    "type first": {"type": "message", "role": "user", "content": [text("x")]},
    "content first": {"content": [text("x")], "role": "user"},
    "empty part beside text": msg(text(""), text("text")),
    "text beside empty": msg(text("text"), text("")),
    "empty beside image": msg(text(""), image()),
    "image only": msg(image()),
    "untrimmed": msg(text("  padded \n")),
    "unicode": msg(text("héllo 🌍 \u0000 nul")),
}


@pytest.mark.parametrize("message", GOOD_MESSAGES.values(), ids=GOOD_MESSAGES.keys())
def test_good_message_is_stored_exactly_as_sent(message: dict[str, Any]) -> None:
    sent = json.dumps([message])
    for result in (create([message]), event(message_event(message))):
        assert isinstance(result, AdmittedCreate | AdmittedMessageEvent), result
        assert json.dumps(result.record()["input"]) == sent  # key order, presence, text verbatim


def test_type_presence_is_kept() -> None:
    with_type = create([msg(text("x"), type="message")])
    without = create([msg(text("x"))])
    assert isinstance(with_type, AdmittedCreate) and isinstance(without, AdmittedCreate)
    assert with_type.input[0]["type"] == "message"
    assert "type" not in without.input[0]


# --- input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("input_", "param"),
    [
        ("", "input"),
        ([], "input"),
        (None, "input"),
        (1, "input"),
        ({"role": "user", "content": [text("x")]}, "input"),
        (True, "input"),
        ("\udc00", "input"),
    ],
)
def test_bad_creation_input(input_: Any, param: str) -> None:
    assert_error(create(input_), *INVALID, param)


def test_string_input_becomes_one_text_message() -> None:
    result = create("  hi  ")
    assert isinstance(result, AdmittedCreate)
    assert result.input == [{"role": "user", "content": [{"type": "input_text", "text": "  hi  "}]}]
    assert result.input_was_string and not result.has_images


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"type": "agent.session.input.message", "input": "hello"}, "input"),
        ({"type": "agent.session.input.message", "input": []}, "input"),
        ({"type": "agent.session.input.message", "input": None}, "input"),
        ({"type": "agent.session.input.message", "input": {}}, "input"),
        ({"type": "agent.session.input.message"}, "input"),
        ({"input": [msg(text("x"))]}, "type"),
        ({"type": None, "input": [msg(text("x"))]}, "type"),
        ({"type": "message", "input": [msg(text("x"))]}, "type"),
        ({"type": "agent.session.input.text", "input": [msg(text("x"))]}, "type"),
        ({**message_event(msg(text("x"))), "call_id": "c"}, "call_id"),
        ({**message_event(msg(text("x"))), "stream": True}, "stream"),
        ({**message_event(msg(text("x"))), "client_event_id": ""}, "client_event_id"),
        ({**message_event(msg(text("x"))), "client_event_id": 7}, "client_event_id"),
        ({**message_event(msg(text("x"))), "client_event_id": "x" * 256}, "client_event_id"),
        ("not an object", None),
        ([message_event(msg(text("x")))], None),
        (None, None),
    ],
)
def test_bad_event_body(body: Any, param: str | None) -> None:
    assert_error(event(body), *INVALID, param)


# --- the create body -------------------------------------------------------------------------

OK = {"harness": "codex", "placement": "none", "input": "hi"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([OK], None),
        ("hi", None),
        (None, None),
        (3, None),
        ({**OK, "model": "gpt"}, "model"),
        ({**OK, "op": "sessions.create"}, "op"),
        ({"placement": "none", "input": "hi"}, "harness"),
        ({**OK, "harness": "Codex"}, "harness"),
        ({**OK, "harness": "gpt_cli"}, "harness"),
        ({**OK, "harness": None}, "harness"),
        ({"harness": "codex", "input": "hi"}, "placement"),
        ({**OK, "placement": "cloud"}, "placement"),
        ({**OK, "placement": ["none"]}, "placement"),
        ({"harness": "codex", "placement": "none"}, "input"),
        ({**OK, "stream": "true"}, "stream"),
        ({**OK, "stream": 1}, "stream"),
        ({**OK, "stream": None}, "stream"),
        ({**OK, "client_request_id": ""}, "client_request_id"),
        ({**OK, "client_request_id": 12}, "client_request_id"),
        ({**OK, "client_request_id": "x" * 256}, "client_request_id"),
        ({**OK, "client_request_id": "\ud800"}, "client_request_id"),
        ({**OK, "metadata": []}, "metadata"),
        ({**OK, "metadata": "x"}, "metadata"),
        ({**OK, "metadata": {"n": float("nan")}}, "metadata.n"),
        ({**OK, "metadata": {"n": float("inf")}}, "metadata.n"),
        ({**OK, "metadata": {"big": 2**64}}, "metadata.big"),
        ({**OK, "metadata": {"a": [1, {"b": "\udfff"}]}}, "metadata.a[1].b"),
        ({**OK, "metadata": {"a": b"bytes"}}, "metadata.a"),
        ({**OK, "tags": "bug"}, "tags"),
        ({**OK, "tags": {"a": 1}}, "tags"),
        ({**OK, "tags": ["ok", 2]}, "tags[1]"),
        ({**OK, "tags": ["ok", None]}, "tags[1]"),
        ({**OK, "external_actor": "slack"}, "external_actor"),
        ({**OK, "external_actor": {"actor_id": "U1"}}, "external_actor.source"),
        ({**OK, "external_actor": {"source": "slack"}}, "external_actor.actor_id"),
        ({**OK, "external_actor": {"source": "", "actor_id": "U1"}}, "external_actor.source"),
        ({**OK, "external_actor": {"source": "s", "actor_id": 1}}, "external_actor.actor_id"),
        (
            {**OK, "external_actor": {"source": "s", "actor_id": "U", "actor_name": 5}},
            "external_actor.actor_name",
        ),
        (
            {**OK, "external_actor": {"source": "s", "actor_id": "U", "metadata": "x"}},
            "external_actor.metadata",
        ),
        (
            {**OK, "external_actor": {"source": "s", "actor_id": "U", "team": "T"}},
            "external_actor.team",
        ),
    ],
)
def test_bad_create_body(body: Any, param: str | None) -> None:
    assert_error(validate_create(body, Limits()), *INVALID, param)


def test_metadata_nesting_is_bounded() -> None:
    deep: Any = "leaf"
    for _ in range(40):
        deep = {"k": deep}
    result = validate_create({**OK, "metadata": deep}, Limits())
    err = assert_error(result, *INVALID, "metadata" + ".k" * 33)
    assert "nested" in err.message


def test_envelope_fields_are_admitted_and_copied() -> None:
    actor = {"source": "slack", "actor_id": "U1", "actor_name": None, "metadata": {"team": "T"}}
    body = {
        **OK,
        "stream": True,
        "client_request_id": "0199d0f2-6c1e-7a3b-9f00-1a2b3c4d5e6f",
        "metadata": {"z": 1, "a": [1.5, None, True, {"x": "y"}]},
        "tags": ["bug-report", ""],
        "external_actor": actor,
    }
    result = validate_create(body, Limits())
    assert isinstance(result, AdmittedCreate)
    rec = result.record()
    assert rec["stream"] is True and rec["client_request_id"] == body["client_request_id"]
    assert json.dumps(rec["metadata"]) == json.dumps(body["metadata"])
    assert rec["tags"] == ["bug-report", ""] and rec["external_actor"] == actor
    body["metadata"]["z"] = 2  # type: ignore[index]
    actor["metadata"]["team"] = "changed"  # type: ignore[index]
    assert result.record()["metadata"]["z"] == 1
    assert result.record()["external_actor"]["metadata"] == {"team": "T"}


def test_null_envelope_fields_mean_absent() -> None:
    body = {**OK, "client_request_id": None, "metadata": None, "tags": None, "external_actor": None}
    result = validate_create(body, Limits())
    assert isinstance(result, AdmittedCreate)
    rec = result.record()
    assert rec["client_request_id"] is None and rec["metadata"] is None and rec["tags"] is None


def test_event_envelope_fields() -> None:
    body = {
        **message_event(msg(text("x"))),
        "client_event_id": "e1",
        "metadata": {"k": "v"},
        "tags": ["t"],
        "external_actor": {"source": "slack", "actor_id": "U1"},
    }
    result = event(body)
    assert isinstance(result, AdmittedMessageEvent)
    rec = result.record()
    assert rec["type"] == "agent.session.input.message" and rec["client_event_id"] == "e1"
    assert (rec["metadata"], rec["tags"]) == ({"k": "v"}, ["t"])
    assert_error(event({**body, "tags": [1]}), *INVALID, "tags[0]")


# --- defensive copies --------------------------------------------------------------------------


def test_admitted_content_is_a_deep_copy() -> None:
    sent = [msg(text("a"), image()), msg(text("b"), type="message")]
    before = json.dumps(sent)
    result = create(sent)
    assert isinstance(result, AdmittedCreate)
    sent[0]["content"][0]["text"] = "mutated"
    sent[1]["content"].append(text("more"))
    del sent[1]["type"]
    assert json.dumps(result.input) == before
    rec = result.record()
    rec["input"][0]["content"].clear()
    assert json.dumps(result.record()["input"]) == before


# --- limits ----------------------------------------------------------------------------------


def test_message_count_limit() -> None:
    limits = Limits(max_messages_per_request=3)
    ok = [msg(text("x"))] * 3
    assert not isinstance(validate_create(create_body(ok), limits), ApiError)
    assert_error(validate_create(create_body([*ok, msg(text("y"))]), limits), *INVALID, "input[3]")
    assert_error(event(message_event(*ok, msg(text("y"))), limits=limits), *INVALID, "input[3]")


def test_part_count_limit() -> None:
    limits = Limits(max_parts_per_message=2)
    assert not isinstance(
        validate_create(create_body([msg(text("a"), text("b"))]), limits), ApiError
    )
    body = create_body([msg(text("a")), msg(text("a"), text("b"), text("c"))])
    assert_error(validate_create(body, limits), *INVALID, "input[1].content[2]")


def test_images_per_request_limit_is_400_naming_the_first_image_over() -> None:
    limits = Limits(max_images_per_request=2)
    two = create_body([msg(image(), text("x")), msg(image())])
    assert not isinstance(validate_create(two, limits), ApiError)
    three = create_body([msg(image(), text("x")), msg(text("y"), image(), image())])
    assert_error(validate_create(three, limits), *INVALID, "input[1].content[2]")
    assert_error(
        event(message_event(msg(image(), image(), image())), limits=limits),
        *INVALID,
        "input[0].content[2]",
    )


def test_body_size() -> None:
    limits = Limits(max_body_bytes=100)
    assert check_body_size(100, limits) is None
    err = check_body_size(101, limits)
    assert err is not None and (err.status, err.type, err.param) == (413, "request_too_large", None)


def test_limits_from_settings() -> None:
    s = Settings(
        max_image_bytes=1,
        max_image_pixels=2,
        max_images_per_request=3,
        max_parts_per_message=4,
        max_messages_per_request=5,
        max_body_bytes=6,
    )
    assert Limits.from_settings(s) == Limits(
        max_body_bytes=6,
        max_image_bytes=1,
        max_image_pixels=2,
        max_images_per_request=3,
        max_parts_per_message=4,
        max_messages_per_request=5,
    )
    assert Limits.from_settings(Settings()) == Limits()

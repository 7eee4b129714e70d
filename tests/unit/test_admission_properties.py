"""Hypothesis properties of the validator: admitted content round-trips byte for byte, arbitrary
JSON never raises out of it, and every admitted record is strictly encodable JSON."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.admission.domain.validation import (
    AdmittedCreate,
    AdmittedMessageEvent,
    AdmittedToolResult,
    Limits,
    validate_create,
    validate_event,
)
from shared.domain.errors import STATUS, ApiError
from shared.domain.whitespace import WHITESPACE
from tests.support.budget import examples
from tests.support.builders import JPEG_URI, PNG_URI

LIMITS = Limits()
HARNESSES = st.sampled_from(["codex", "claude_code", "minimax_code"])
PLACEMENTS = st.sampled_from(["none", "openai_hosted", "self_hosted"])

# text with plenty of whitespace, empties, non-BMP and control characters
TEXT = st.one_of(
    st.text(),
    st.text(alphabet=st.sampled_from(sorted(WHITESPACE)), max_size=4),
    st.just(""),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1),
)
TEXT_PART = st.fixed_dictionaries({"type": st.just("input_text"), "text": TEXT})
IMAGE_PART = st.fixed_dictionaries(
    {"type": st.just("input_image"), "image_url": st.sampled_from([PNG_URI, JPEG_URI])}
)
PART = st.one_of(TEXT_PART, TEXT_PART, IMAGE_PART)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    parts = draw(st.lists(PART, min_size=1, max_size=5))
    if draw(st.booleans()):  # key order and presence of "type" vary
        keys = draw(st.permutations(["role", "type", "content"]))
    else:
        keys = draw(st.permutations(["role", "content"]))
    values = {"role": "user", "type": "message", "content": parts}
    return {k: values[k] for k in keys}


def is_content_valid(m: dict[str, Any]) -> bool:
    return any(p["type"] == "input_image" or p["text"] for p in m["content"])


def admitted_or_expected_error(result: object) -> None:
    if isinstance(result, ApiError):
        assert result.status in STATUS.values() and result.status < 500


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages(), min_size=1, max_size=4), HARNESSES, PLACEMENTS)
def test_admitted_content_round_trips_byte_for_byte(
    sent: list[dict[str, Any]], harness: str, placement: str
) -> None:
    before = json.dumps(sent, ensure_ascii=False)
    for result in (
        validate_create({"harness": harness, "placement": placement, "input": sent}, LIMITS),
        validate_event(
            {"type": "agent.session.input.message", "input": sent}, harness, placement, LIMITS
        ),
    ):
        if all(is_content_valid(m) for m in sent) and harness == "codex":
            assert isinstance(result, AdmittedCreate | AdmittedMessageEvent), result
        if isinstance(result, ApiError):
            # only the content rule or a harness profile rule may refuse these messages
            assert result.type in ("invalid_request", "unsupported_or_invalid_configuration")
            continue
        assert json.dumps(result.record()["input"], ensure_ascii=False) == before
        assert isinstance(result, AdmittedCreate | AdmittedMessageEvent)
        assert json.dumps(result.input, ensure_ascii=False) == before
    assert json.dumps(sent, ensure_ascii=False) == before  # the caller's value is untouched


@settings(max_examples=examples(200))
@given(
    # at most 20 parts: more than 20 images in one request is refused (``max_images_per_request``,
    # tested on its own); an unbounded list drew 21 images now and then
    st.one_of(st.none(), st.text(),
              st.lists(st.one_of(TEXT_PART, IMAGE_PART), min_size=1, max_size=20)),
    st.one_of(st.none(), st.text()),
    st.booleans(),
    st.booleans(),
    st.booleans(),
)
def test_tool_result_round_trips(
    output: Any, error: Any, success: bool, with_output: bool, with_error: bool
) -> None:
    body: dict[str, Any] = {
        "type": "agent.session.input.tool_result",
        "call_id": "c",
        "success": success,
    }
    if with_output:
        body["output"] = output
    if with_error:
        body["error"] = error
    result = validate_event(body, "codex", "none", LIMITS)
    assert isinstance(result, AdmittedToolResult), result
    sub = result.submission()
    for k in ("output", "error"):
        assert (k in sub) == (k in body)
        if k in body:
            assert json.dumps(sub[k]) == json.dumps(body[k])


# --- arbitrary JSON ---------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
    st.sampled_from(
        [
            "user",
            "message",
            "input_text",
            "input_image",
            PNG_URI,
            "codex",
            "none",
            "agent.session.input.message",
            "agent.session.input.tool_result",
            "",
            " ",
        ]
    ),
)
KEYS = st.one_of(
    st.text(max_size=8),
    st.sampled_from(
        [
            "harness",
            "placement",
            "input",
            "stream",
            "role",
            "type",
            "content",
            "text",
            "image_url",
            "call_id",
            "success",
            "output",
            "error",
            "metadata",
            "tags",
            "external_actor",
            "source",
            "actor_id",
            "client_request_id",
            "client_event_id",
        ]
    ),
)
JSON = st.recursive(
    SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(KEYS, children, max_size=6)
    ),
    max_leaves=40,
)


def near_valid_create() -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {"harness": st.one_of(HARNESSES, JSON), "placement": st.one_of(PLACEMENTS, JSON)},
        optional={
            "input": st.one_of(JSON, st.lists(st.one_of(messages(), JSON), max_size=3)),
            "stream": JSON,
            "metadata": JSON,
            "tags": JSON,
            "external_actor": JSON,
            "client_request_id": JSON,
        },
    )


def near_valid_event() -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["agent.session.input.message", "agent.session.input.tool_result"]
            )
        },
        optional={
            "input": st.one_of(JSON, st.lists(st.one_of(messages(), JSON), max_size=3)),
            "call_id": JSON,
            "success": st.one_of(st.booleans(), JSON),
            "output": st.one_of(JSON, st.lists(st.one_of(TEXT_PART, IMAGE_PART, JSON), max_size=3)),
            "error": JSON,
            "metadata": JSON,
        },
    )


def strictly_encodable(record: dict[str, Any]) -> None:
    json.dumps(record, allow_nan=False, ensure_ascii=False).encode("utf-8")


@settings(max_examples=examples(400), suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSON, near_valid_create()))
def test_arbitrary_json_never_raises_out_of_validate_create(body: Any) -> None:
    result = validate_create(body, LIMITS)
    admitted_or_expected_error(result)
    if not isinstance(result, ApiError):
        strictly_encodable(result.record())


@settings(max_examples=examples(400), suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(JSON, near_valid_event()), HARNESSES, PLACEMENTS)
def test_arbitrary_json_never_raises_out_of_validate_event(
    body: Any, harness: str, placement: str
) -> None:
    result = validate_event(body, harness, placement, LIMITS)
    admitted_or_expected_error(result)
    if not isinstance(result, ApiError):
        strictly_encodable(result.record())


def test_non_json_python_values_are_errors_not_exceptions() -> None:
    weird: list[Any] = [
        object(),
        {1: "int key"},
        {"harness": "codex", "placement": "none", "input": ("tuple",)},
        {"harness": "codex", "placement": "none", "input": "x", "metadata": {"k": {1, 2}}},
        {"harness": "codex", "placement": "none", "input": "x", "metadata": {2: "v"}},
        {"harness": b"codex"},
    ]
    for body in weird:
        assert isinstance(validate_create(body, LIMITS), ApiError)
        assert isinstance(validate_event(body, "codex", "none", LIMITS), ApiError)

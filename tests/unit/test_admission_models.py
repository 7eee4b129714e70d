"""The pydantic models (typing and the OpenAPI document) agree with the raw-JSON validator on
admitted bodies, and are strict: no coercion, no extra fields."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from services.admission.domain.validation import Limits, validate_create, validate_event
from shared.domain.content import (
    CreateSessionBody,
    EventBody,
    InputImage,
    InputText,
    Message,
    ToolResultEventBody,
)
from shared.domain.errors import ApiError
from tests.support.builders import JPEG_URI, PNG_URI, image, message_event, msg, text, tool_result

EVENTS: TypeAdapter[Any] = TypeAdapter(EventBody)

ADMITTED_CREATES = [
    {"harness": "codex", "placement": "none", "input": "hi"},
    {
        "harness": "claude_code",
        "placement": "self_hosted",
        "input": [msg(text(""), text("x"), type="message"), msg(image(JPEG_URI))],
        "stream": True,
        "client_request_id": "r1",
        "metadata": {"a": [1, 2.5, None]},
        "tags": ["t"],
        "external_actor": {"source": "slack", "actor_id": "U1", "actor_name": None},
    },
]
ADMITTED_EVENTS = [
    message_event(msg(text(" "))),
    tool_result(True, output=[text("a"), image(PNG_URI)], error=None),
    tool_result(False, output="x"),
    tool_result(False),
]


@pytest.mark.parametrize("body", ADMITTED_CREATES)
def test_admitted_create_bodies_validate_against_the_model(body: dict[str, Any]) -> None:
    assert not isinstance(validate_create(body, Limits()), ApiError)
    CreateSessionBody.model_validate(body)


@pytest.mark.parametrize("body", ADMITTED_EVENTS)
def test_admitted_event_bodies_validate_against_the_model(body: dict[str, Any]) -> None:
    assert not isinstance(validate_event(body, "codex", "none", Limits()), ApiError)
    EVENTS.validate_python(body)


@pytest.mark.parametrize(
    ("model", "value"),
    [
        (InputText, {"type": "input_text", "text": 1}),
        (InputText, {"type": "input_text", "text": "x", "extra": 1}),
        (InputImage, {"type": "input_image", "image_url": "https://x/y.png"}),
        (InputImage, {"type": "input_image", "image_url": PNG_URI, "detail": "low"}),
        (Message, {"role": "user", "type": None, "content": [text("x")]}),
        (Message, {"role": "user", "type": "", "content": [text("x")]}),
        (Message, {"role": "user", "content": "x"}),
        (Message, {"role": "user", "content": []}),
        (Message, {"role": "assistant", "content": [text("x")]}),
        (ToolResultEventBody, {**tool_result(True), "success": "true"}),
        (ToolResultEventBody, {**tool_result(True), "output": []}),
        (CreateSessionBody, {"harness": "codex", "placement": "none", "input": ""}),
        (CreateSessionBody, {"harness": "codex", "placement": "none", "input": [], "x": 1}),
        (CreateSessionBody, {"harness": "codex", "placement": "none", "input": "x", "stream": 1}),
    ],
)
def test_models_are_strict(model: Any, value: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        model.model_validate(value)


def test_models_produce_json_schemas_for_openapi() -> None:
    schema = CreateSessionBody.model_json_schema()
    assert set(schema["required"]) == {"harness", "placement", "input"}
    assert schema["additionalProperties"] is False
    events = EVENTS.json_schema()
    assert "discriminator" in events or "oneOf" in events

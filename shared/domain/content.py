"""The content model as pydantic v2 models: typing, the OpenAPI document and the record
schemas.

The models are strict and forbid extra fields, but admission does **not** validate through them:
pydantic would coerce nothing in strict mode, yet it would rebuild the values (dropping the
absence of an optional key such as a message's ``type``, and the key order). Admission
(``services.admission.domain.validation``) works on the parsed JSON itself, checks every rule,
and returns a defensive deep copy of exactly what was sent.
``tests/unit/test_admission_models.py`` checks that everything admission admits also validates
against the models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.messages.schemas import HarnessName, Placement

_STRICT = ConfigDict(strict=True, extra="forbid")

DATA_URI_PATTERN = r"^data:image/(png|jpeg);base64,[A-Za-z0-9+/]*={0,2}$"


class InputText(BaseModel):
    model_config = _STRICT
    type: Literal["input_text"]
    text: str


class InputImage(BaseModel):
    model_config = _STRICT
    type: Literal["input_image"]
    image_url: Annotated[str, Field(pattern=DATA_URI_PATTERN)]


InputContent = Annotated[InputText | InputImage, Field(discriminator="type")]


class Message(BaseModel):
    model_config = _STRICT
    role: Literal["user"]
    type: Literal["message"] = "message"  # optional; explicit null or "" is invalid
    content: Annotated[list[InputContent], Field(min_length=1)]


# The documented shape of the envelope fields; admission enforces the limits
# (``services.admission.domain.validation.envelope``; metadata: 16 KiB as compact JSON and 64 keys).
Metadata = Annotated[dict[str, Any], Field(max_length=64, description=(
    "free-form JSON object, stored and echoed exactly as sent, never interpreted; at most 64 "
    "keys and 16 KiB as compact UTF-8 JSON"))]
Tags = Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=20)]
ActorField = Annotated[str, Field(min_length=1, max_length=255)]


class ExternalActor(BaseModel):
    model_config = _STRICT
    source: ActorField
    actor_id: ActorField
    actor_name: Annotated[str, Field(max_length=255)] | None = None
    metadata: Metadata | None = None


IdString = Annotated[str, Field(min_length=1, max_length=255)]


class CreateSessionBody(BaseModel):
    model_config = _STRICT
    harness: HarnessName
    placement: Placement
    input: Annotated[str, Field(min_length=1)] | Annotated[list[Message], Field(min_length=1)]
    stream: bool = False
    client_request_id: IdString | None = None
    metadata: Metadata | None = None
    tags: Tags | None = None
    external_actor: ExternalActor | None = None


class MessageEventBody(BaseModel):
    model_config = _STRICT
    type: Literal["agent.session.input.message"]
    input: Annotated[list[Message], Field(min_length=1)]
    client_event_id: IdString | None = None
    metadata: Metadata | None = None
    tags: Tags | None = None
    external_actor: ExternalActor | None = None


class ToolResultEventBody(BaseModel):
    model_config = _STRICT
    type: Literal["agent.session.input.tool_result"]
    call_id: IdString
    success: bool
    output: str | Annotated[list[InputContent], Field(min_length=1)] | None = None
    error: str | None = None
    client_event_id: IdString | None = None
    metadata: Metadata | None = None
    tags: Tags | None = None
    external_actor: ExternalActor | None = None


EventBody = Annotated[MessageEventBody | ToolResultEventBody, Field(discriminator="type")]

"""The public record contracts of CONTRACT §2 as pydantic models — the one typed description of
what travels on each public topic, from which ``docs/schemas/*.json`` and ``docs/asyncapi.json``
are generated (``python -m shared.contracts``; a test fails when the checked-in files drift).

Content stays exact: message and output content are the content model's parts
(``shared.domain.content``), and a record is never re-serialised through these models on the hot
path — services keep the JSON they were given; the models describe it, and the tests validate
every record the system produces against the generated JSON Schemas.

Versioning: every record names ``schema`` (``"session.item/1"``). A new optional field keeps the
version (consumers ignore fields they do not know); a removed, renamed or re-meant field makes
``/2`` (docs/client.md, "Consuming `session.items`", its schema versions).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from shared.domain.content import (
    CreateSessionBody,
    ExternalActor,
    InputContent,
    MessageEventBody,
    Metadata,
    Tags,
    ToolResultEventBody,
)
from shared.domain.errors import ErrorType
from shared.messages import schemas

_EXACT = ConfigDict(extra="forbid")
# records whose producers are Runtimes (outside this repo) may carry more than Core reads
_OPEN = ConfigDict(extra="allow")

SessionId = Annotated[str, Field(pattern=r"^session_[0-9a-f]{32}$")]
RuntimeId = Annotated[str, Field(min_length=1)]
Timestamp = Annotated[str, Field(description="RFC 3339")]


# --------------------------------------------------------------------------- session.input
class _InputEnvelope(BaseModel):
    request_id: Annotated[str, Field(min_length=1, max_length=255)]
    tenant: str | None = Field(default=None, description="the tenant the request acts for")
    schema_: schemas.InputSchema | None = Field(default=None, alias="schema")


class SessionsCreateRecord(CreateSessionBody, _InputEnvelope):
    """``op: sessions.create``: the body of ``POST /v1/sessions`` plus the envelope."""

    op: Literal["sessions.create"]


class MessageEventRecord(MessageEventBody, _InputEnvelope):
    op: Literal["events.create"]
    session_id: SessionId


class ToolResultEventRecord(ToolResultEventBody, _InputEnvelope):
    op: Literal["events.create"]
    session_id: SessionId


SessionInputRecord = SessionsCreateRecord | MessageEventRecord | ToolResultEventRecord


class SessionInputResult(BaseModel):
    """``session.input.results``, keyed by ``request_id``: the HTTP answer the request got."""

    model_config = _OPEN
    schema_: schemas.InputResultSchema = Field(alias="schema")
    request_id: str
    status: int
    body: dict[str, Any]


# --------------------------------------------------------------------------- session.items
class _ItemBase(BaseModel):
    model_config = _EXACT
    schema_: schemas.ItemSchema | None = Field(
        default=None, alias="schema", description="present on the topic, absent in HTTP bodies")
    id: Annotated[str, Field(pattern=r"^item_[0-9a-f]{32}$")]
    session_id: SessionId
    sequence: Annotated[int, Field(ge=1)]
    created_at: Timestamp
    tenant: str | None = Field(
        default=None, description="the tenant that created the Session: on the topic, to route "
        "by (absent in HTTP bodies, and on records published before it was added)")


class _Envelope(BaseModel):
    metadata: Metadata | None = None
    tags: Tags | None = None
    external_actor: ExternalActor | None = None


class MessageItem(_ItemBase, _Envelope):
    type: Literal["message"]
    role: Literal["user"]
    content: list[InputContent] = Field(description="exactly as sent, byte for byte")
    event_id: str
    turn_id: str


class OutputText(BaseModel):
    model_config = _EXACT
    type: Literal["output_text"]
    text: str = Field(description="exactly as the harness printed it: never trimmed, never "
                                  "joined with another message")


class AgentMessageItem(_ItemBase):
    """What the harness's root agent said in a Turn (one native message: a Codex
    ``agentMessage``, one text block of a Claude Code root ``assistant`` record)."""

    type: Literal["message"]
    role: Literal["agent"]
    turn_id: str
    content: Annotated[list[OutputText], Field(min_length=1, max_length=1)]
    phase: Literal["commentary", "final_answer"] = Field(
        description="final_answer: the Turn's answer; commentary: said on the way")
    phase_source: Literal["provider", "derived"] = Field(
        description="provider: the harness reported the phase; derived: Core inferred it (the "
                    "Turn's last agent message with no function call after it is its "
                    "final_answer)")


class Usage(BaseModel):
    model_config = _EXACT
    input_tokens: Annotated[int, Field(ge=0)]
    output_tokens: Annotated[int, Field(ge=0)]
    cached_input_tokens: Annotated[int, Field(ge=0)]


class FunctionCallItem(_ItemBase):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: Any
    turn_id: str | None


class FunctionCallOutputItem(_ItemBase, _Envelope):
    type: Literal["function_call_output"]
    call_id: str
    success: bool
    output: str | list[InputContent] | None
    error: str | None
    event_id: str
    turn_id: str | None


class FunctionCallApplicationItem(_ItemBase):
    type: Literal["function_call_application"]
    call_id: str
    state: Literal["applied", "uncertain", "failed"]
    reason: str | None


class TurnItem(_ItemBase):
    type: Literal["turn"]
    turn_id: str
    state: Literal["started", "completed", "failed"]
    reason: str | None
    usage: Usage | None = Field(
        default=None, description="on a Turn's end: the tokens the harness reported for the "
        "Turn (summed over its model responses), null when it reported none; absent on "
        "``started``")


AnyMessageItem = Annotated[MessageItem | AgentMessageItem, Field(discriminator="role")]
Item = Annotated[AnyMessageItem | FunctionCallItem | FunctionCallOutputItem
                 | FunctionCallApplicationItem | TurnItem, Field(discriminator="type")]


# --------------------------------------------------------------------------- HTTP answers
# The bodies of CONTRACT §1, from which services/admission/openapi.py builds every response of
# docs/openapi.json (schemathesis checks the served answers against them).
Harness = schemas.HarnessName
Placement = schemas.Placement
SessionStatus = Literal["waiting_for_runtime", "bound"]
Delivery = Literal["started", "steered", "resumed", "duplicate"]
CallState = Literal["open", "pending", "applied", "uncertain", "failed"]


class ErrorDetail(BaseModel):
    model_config = _EXACT
    type: ErrorType
    message: str
    param: str | None


class Error(BaseModel):
    """Every 4xx/5xx answer (CONTRACT §1 Errors)."""

    model_config = _EXACT
    error: ErrorDetail


class SessionCreated(BaseModel):
    """``POST /v1/sessions``: the Session and the Items its first input produced."""

    model_config = _EXACT
    id: SessionId
    harness: Harness
    placement: Placement
    status: SessionStatus
    metadata: Metadata | None = Field(default=None, description="present when sent")
    items: list[Item]


class EventAccepted(BaseModel):
    """``POST /v1/sessions/{id}/events``: how the event was delivered, and its Items."""

    model_config = _EXACT
    event_id: str
    delivery: Delivery
    items: list[Item]


class SessionTurn(BaseModel):
    model_config = _EXACT
    id: str | None
    running: bool


class Session(BaseModel):
    """``GET /v1/sessions/{id}``."""

    model_config = _EXACT
    id: SessionId
    harness: Harness
    placement: Placement
    status: SessionStatus
    binding: dict[str, Any] | None = Field(
        description="the last binding decision: runtime_id, reason, at")
    runtime_id: str | None
    turn: SessionTurn
    last_sequence: Annotated[int, Field(ge=0)]
    created_at: Timestamp | None
    metadata: Metadata | None


class ItemPage(BaseModel):
    """``GET /v1/sessions/{id}/items`` without ``stream``."""

    model_config = _EXACT
    items: list[Item]
    has_more: bool
    next_after: Annotated[int, Field(ge=0)]


class Application(BaseModel):
    model_config = _OPEN
    state: Literal["pending", "applied", "uncertain", "failed"]
    reason: str | None
    at: Timestamp


class ToolResult(BaseModel):
    """``GET /v1/sessions/{id}/tool_results/{call_id}``."""

    model_config = _EXACT
    session_id: SessionId
    call_id: str
    name: str | None
    arguments: Any
    submitted: bool
    submission: dict[str, Any] | None = Field(
        description="the result exactly as submitted: call_id, success, and only the output / "
                    "error fields that were sent")
    fields_present: list[str] | None
    submitted_at: Timestamp | None
    application: Application | None
    state: CallState


class Health(BaseModel):
    model_config = _OPEN
    status: str


# --------------------------------------------------------------------------- runtime.*
class Capabilities(BaseModel):
    model_config = _OPEN
    message_images: bool
    function_result_images: bool


class RuntimeRegistration(BaseModel):
    model_config = _OPEN
    schema_: schemas.RegistrationSchema = Field(alias="schema")
    runtime_id: RuntimeId
    harness: Harness
    bridge_protocol: int
    placements: list[Placement]
    capabilities: Capabilities
    status: Literal["ready", "draining", "gone"]
    heartbeat_at: Timestamp


class DeliveryMessage(BaseModel):
    model_config = _EXACT
    role: Literal["user"]
    content: list[InputContent]


class _DeliveryBase(BaseModel):
    model_config = _OPEN
    schema_: schemas.DeliverySchema = Field(alias="schema")
    delivery_id: str
    runtime_id: RuntimeId
    session_id: SessionId
    turn_id: str | None


class MessagesDelivery(_DeliveryBase):
    kind: Literal["start", "steer"]
    messages: list[DeliveryMessage]


class FunctionResultDelivery(_DeliveryBase):
    kind: Literal["function_result"]
    call_id: str
    name: str | None
    success: bool
    content: list[InputContent] = Field(
        description="the output parts (a string output is one text part), then the error text "
                    "as a final text part")


class InterruptDelivery(_DeliveryBase):
    """Core failed this Turn while the Runtime runs it (the dispatcher refused an input of it):
    the Runtime ends the native Turn and forwards its end. For any other Turn it does nothing."""

    kind: Literal["interrupt"]
    reason: str = Field(description="why Core failed the Turn (its failed turn Item's reason)")


RuntimeDelivery = Annotated[MessagesDelivery | FunctionResultDelivery | InterruptDelivery,
                            Field(discriminator="kind")]


class RuntimeObservation(BaseModel):
    """What a harness recorded (``native``: one native record as the harness printed it), or a
    refusal (``native: null`` with ``refusal``)."""

    model_config = _OPEN
    schema_: schemas.ObservationSchema = Field(alias="schema")
    runtime_id: RuntimeId
    session_id: SessionId
    harness: Harness
    observed_at: Timestamp
    native: dict[str, Any] | None


# --------------------------------------------------------------------------- *.dlq
class DeadLetter(BaseModel):
    """A record that left ``source_topic`` unprocessed (``shared.kafka.dlq_envelope`` writes it;
    docs/reliability.md). Keyed by the original record's key."""

    model_config = _OPEN
    schema_: schemas.DeadLetterSchema = Field(alias="schema")
    source_topic: str = Field(description="the topic the record was read from")
    partition: int | None = Field(description="the partition it was read from")
    offset: int | None = Field(description="its offset there")
    reason: Literal["undecodable", "missing_schema", "unexpected_schema", "invalid_fields",
                    "unprocessable", "too_large", "not_bound_runtime",
                    "wrong_tenant", "unsealable"] = Field(
        description="the reason code (shared/domain/poison.py; the label of "
                    "session_core_dlq_records_total)")
    detail: str = Field(description="the reason in words (up to 300 characters)")
    failed_at: Timestamp
    key: str | None = Field(description="the original key as UTF-8 text (lossy); null when "
                                        "the record had none or it is too large to repeat")
    key_b64: str | None = Field(description="the original key's bytes, base64")
    value_b64: str = Field(description="the original value's bytes, base64 — all of them "
                                       "unless value_truncated")
    value: str | None = Field(None, description="the original value as UTF-8 text (lossy), "
                                                "for reading; absent when the value is over "
                                                "1 MiB or would not fit the DLQ record")
    value_truncated: bool | None = Field(None, description="true when value_b64 holds only "
                                                           "the first bytes of the value (the "
                                                           "whole would not fit the DLQ topic)")
    value_bytes: int | None = Field(None, description="with value_truncated: the original "
                                                      "value's length")
    value_sha256: str | None = Field(None, description="with value_truncated: the original "
                                                       "value's SHA-256, hex")


# --------------------------------------------------------------------------- generation
SCHEMAS: dict[str, Any] = {
    "session.input": SessionInputRecord,
    "session.input.results": SessionInputResult,
    "session.items": Item,
    "runtime.registrations": RuntimeRegistration,
    "runtime.deliveries": RuntimeDelivery,
    "runtime.observations": RuntimeObservation,
    "dlq": DeadLetter,
}
SCHEMA_DIR = Path(__file__).resolve().parent.parent / "docs" / "schemas"


def name_nested_unions(value: Any, defs: dict[str, Any], ref_template: str) -> Any:
    """``value`` with each union nested in a discriminated union (the message Items, by
    ``role`` under ``type: message``) made a named schema in ``defs``: pydantic writes it inline
    as a discriminator ``mapping`` value, where JSON Schema / OpenAPI / AsyncAPI want a
    reference. Returns the rewritten value; ``defs`` gains ``AnyMessageItem``."""
    if isinstance(value, list):
        return [name_nested_unions(v, defs, ref_template) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: name_nested_unions(v, defs, ref_template) for k, v in value.items()}
    disc = out.get("discriminator")
    mapping = disc.get("mapping") or {} if isinstance(disc, dict) else {}
    for tag, target in list(mapping.items()):
        if isinstance(target, dict):
            name = f"Any{tag.title().replace('_', '')}Item"
            defs[name] = target
            ref = ref_template.format(model=name)
            mapping[tag] = ref
            out["oneOf"] = [{"$ref": ref} if v == target else v for v in out.get("oneOf", [])]
    return out


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one topic's records, as a consumer reads them."""
    schema: dict[str, Any] = TypeAdapter(SCHEMAS[name]).json_schema(by_alias=True,
                                                                     mode="serialization")
    named: dict[str, Any] = {}
    schema = name_nested_unions(schema, named, "#/$defs/{model}")
    if named:
        schema["$defs"] = dict(sorted({**schema.get("$defs", {}), **named}.items()))
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://session-core.dev/schemas/{name}.json"
    schema.setdefault("title", name)
    return schema


def rendered(name: str) -> str:
    return json.dumps(json_schema(name), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``docs/schemas/<topic>.json`` for every public topic (and ``docs/asyncapi.json``)."""
    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    for name in SCHEMAS:
        (SCHEMA_DIR / f"{name}.json").write_text(rendered(name))
    from shared.asyncapi import rendered as asyncapi_rendered

    (SCHEMA_DIR.parent / "asyncapi.json").write_text(asyncapi_rendered())
    sys.stdout.write(f"wrote {len(SCHEMAS)} schemas to {SCHEMA_DIR} and docs/asyncapi.json\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

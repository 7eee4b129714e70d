"""``session.item/1``: the public Items (CONTRACT §2, storage → consumers; the same shapes in
the HTTP answers without the topic envelope). One model, ``Item``: the published schema
(``docs/schemas/session.items.json``) and the OpenAPI answers are generated from it, admission's
Item tail decodes with it (``shared.messages.decode.ITEM``), and the Items storage builds are
checked against it (tests/unit/test_builders_match_models.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from shared.domain.content import ExternalActor, InputContent, Metadata, Tags
from shared.messages import schemas
from shared.messages.fields import CLOSED, SessionId, Timestamp


class _ItemBase(BaseModel):
    model_config = CLOSED
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
    model_config = CLOSED
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
    model_config = CLOSED
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
AnyItem = (MessageItem | AgentMessageItem | FunctionCallItem | FunctionCallOutputItem
           | FunctionCallApplicationItem | TurnItem)
"""What ``Item`` decodes to (for annotations)."""

"""``session.input/1`` (event producers → admission: the HTTP bodies plus the envelope) and
``session.input.result/1`` (admission → event producers: the answer). Admission reads its input
with its own validator (``services.admission.domain.validation``: exact content, every rule of
the content model), so these models are the published description of those records
(``docs/schemas/``, ``docs/asyncapi.json``); tests check admission's answers against them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from shared.domain.content import CreateSessionBody, MessageEventBody, ToolResultEventBody
from shared.messages import schemas
from shared.messages.fields import OPEN, SessionId


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

    model_config = OPEN
    schema_: schemas.InputResultSchema = Field(alias="schema")
    request_id: str
    status: int
    body: dict[str, Any]

"""The bodies of admission's HTTP answers (CONTRACT §1) as pydantic models, from which
``services.admission.openapi`` builds every response of docs/openapi.json (schemathesis checks
the served answers against them). An Item is the record model of ``session.item/1``
(``shared.messages.items``) without its topic envelope."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from shared.domain.content import Metadata
from shared.domain.errors import ErrorType
from shared.messages import schemas
from shared.messages.fields import EXACT, OPEN, SessionId, Timestamp
from shared.messages.items import Item

Harness = schemas.HarnessName
Placement = schemas.Placement
SessionStatus = Literal["waiting_for_runtime", "bound"]
Delivery = Literal["started", "steered", "resumed", "duplicate"]
CallState = Literal["open", "pending", "applied", "uncertain", "failed"]


class ErrorDetail(BaseModel):
    model_config = EXACT
    type: ErrorType
    message: str
    param: str | None


class Error(BaseModel):
    """Every 4xx/5xx answer (CONTRACT §1 Errors)."""

    model_config = EXACT
    error: ErrorDetail


class SessionCreated(BaseModel):
    """``POST /v1/sessions``: the Session and the Items its first input produced."""

    model_config = EXACT
    id: SessionId
    harness: Harness
    placement: Placement
    status: SessionStatus
    metadata: Metadata | None = Field(default=None, description="present when sent")
    items: list[Item]


class EventAccepted(BaseModel):
    """``POST /v1/sessions/{id}/events``: how the event was delivered, and its Items."""

    model_config = EXACT
    event_id: str
    delivery: Delivery
    items: list[Item]


class SessionTurn(BaseModel):
    model_config = EXACT
    id: str | None
    running: bool


class Session(BaseModel):
    """``GET /v1/sessions/{id}``."""

    model_config = EXACT
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

    model_config = EXACT
    items: list[Item]
    has_more: bool
    next_after: Annotated[int, Field(ge=0)]


class Application(BaseModel):
    model_config = OPEN
    state: Literal["pending", "applied", "uncertain", "failed"]
    reason: str | None
    at: Timestamp


class ToolResult(BaseModel):
    """``GET /v1/sessions/{id}/tool_results/{call_id}``."""

    model_config = EXACT
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
    model_config = OPEN
    status: str

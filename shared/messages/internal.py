"""The records between Core's own services, each one model that its producer's output is
checked against and its consumer decodes with (``shared.messages.decode``):
``session.admitted/1`` (admission → storage), ``core.fact/1`` (dispatcher, receipt tracker →
storage), ``session.stored/1`` (storage → dispatcher) and ``storage.reply/1`` (storage →
admission). Internal: no published schema; each declares what its consumer reads, and every
other field is kept as it came."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from shared.messages import schemas
from shared.messages.fields import READ


class _Record(BaseModel):
    model_config = READ


class AdmittedCreate(_Record):
    """``session.admitted/1``, ``op: sessions.create`` (admission → storage)."""

    schema_: schemas.AdmittedSchema = Field(alias="schema")
    op: Literal["sessions.create"]
    request_id: str
    session_id: str
    event_id: str
    fingerprint: str


class AdmittedEvent(_Record):
    """``session.admitted/1``, ``op: events.create``: a message or a function result."""

    schema_: schemas.AdmittedSchema = Field(alias="schema")
    op: Literal["events.create"]
    request_id: str
    session_id: str
    event_id: str
    fingerprint: str
    event_type: str


Admitted = Annotated[AdmittedCreate | AdmittedEvent, Field(discriminator="op")]


class Fact(_Record):
    """``core.fact/1`` (dispatcher, receipt tracker → storage)."""

    schema_: schemas.FactSchema = Field(alias="schema")
    fact_id: str
    session_id: str
    kind: str


class StoredMessage(_Record):
    """One message of a stored input; its ``content`` parts pass through untouched."""

    content: list[Any]


class _Stored(_Record):
    schema_: schemas.StoredSchema = Field(alias="schema")
    session_id: str
    event_id: str
    harness: str
    placement: str
    delivery_id: str | None = None  # present when an input is handed over again


class StoredMessages(_Stored):
    """``session.stored/1`` (storage → dispatcher): messages that start or steer a Turn."""

    kind: Literal["start", "steer"]
    turn_id: str
    messages: list[StoredMessage]
    has_images: bool = False


class Submission(_Record):
    """A function result as it was submitted (only the fields the submitter sent)."""

    success: bool
    output: str | list[Any] | None = None
    error: str | None = None


class StoredResult(_Stored):
    """``session.stored/1``: a function result for the Runtime whose harness waits for it."""

    kind: Literal["function_result"]
    turn_id: str | None = None
    call_id: str
    name: str | None = None
    submission: Submission
    fields_present: list[str] | None = None


Stored = Annotated[StoredMessages | StoredResult, Field(discriminator="kind")]


class StorageReply(_Record):
    """``storage.reply/1`` (storage → admission, by ``request_id``)."""

    schema_: schemas.StorageReplySchema = Field(alias="schema")
    request_id: str
    status: int
    body: dict[str, Any]

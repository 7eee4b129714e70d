"""The records Core's services consume, as pydantic models, and the one decoder that turns
a record's bytes into one of them — or into the reason it goes to the DLQ.

Each model declares what its consumer reads (strict JSON types: ``"1"`` is not an integer,
``true`` is not a number); everything else a record carries is kept as it came (``extra``),
and free-form values (message content, submissions, tool arguments, native observations) are
typed ``Any``: pydantic hands the decoded JSON values through untouched, so content is never
re-serialised on the way. ``Decoded.value`` is the record exactly as decoded, which is what
storage journals and publishes; ``Decoded.model`` is the typed view a consumer branches on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from shared import records
from shared.domain.poison import (
    INVALID_FIELDS,
    NO_SCHEMA,
    UNDECODABLE,
    UNEXPECTED_SCHEMA,
    Poison,
    decode_json,
)
from shared.messages import schemas

_CONSUMED = ConfigDict(strict=True, extra="allow", populate_by_name=True)


class _Record(BaseModel):
    model_config = _CONSUMED


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


class Observation(_Record):
    """``runtime.observation/1`` as storage and the dispatcher read it (a Runtime may send
    more): storage reads ``native``, the dispatcher a ``refusal``."""

    schema_: schemas.ObservationSchema = Field(alias="schema")
    runtime_id: str
    session_id: str
    harness: str | None = None
    native: dict[str, Any] | None = None
    refusal: dict[str, Any] | None = None


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


def _rfc3339(value: str) -> str:
    records.parse_time(value)  # ValueError: not RFC 3339 with a time zone
    return value


class Registration(_Record):
    """``runtime.registration/1`` (Runtimes → dispatcher, compacted by ``runtime_id``) as the
    registry reads it; ``shared.contracts.RuntimeRegistration`` is the whole public shape."""

    schema_: schemas.RegistrationSchema = Field(alias="schema")
    runtime_id: str
    harness: str
    status: Literal["ready", "draining", "gone"]
    placements: list[str]
    heartbeat_at: Annotated[str, AfterValidator(_rfc3339)]
    bridge_protocol: int | None = None
    capabilities: dict[str, Any] | None = None


class Delivery(_Record):
    """``runtime.delivery/1`` as a Runtime reads it. ``kind`` stays a string and the messages
    and content stay undeclared: a delivery the harness cannot run (an unknown kind, no
    messages) is the Runtime's to refuse with a refusal observation, so Core learns why."""

    schema_: schemas.DeliverySchema = Field(alias="schema")
    delivery_id: str
    runtime_id: str
    session_id: str
    kind: str
    call_id: str | None = None
    success: bool | None = None

    @model_validator(mode="after")
    def _result_fields(self) -> Delivery:
        if self.kind == "function_result" and (self.call_id is None or self.success is None):
            raise ValueError("a function_result delivery needs call_id (a string) and "
                             "success (a boolean)")
        return self


class Control(_Record):
    """``runtime.control/1`` (tests and operators → the reference Runtime): switches to set."""

    schema_: schemas.ControlSchema = Field(alias="schema")
    runtime_id: str
    set: dict[str, Any]


class StorageReply(_Record):
    """``storage.reply/1`` (storage → admission, by ``request_id``)."""

    schema_: schemas.StorageReplySchema = Field(alias="schema")
    request_id: str
    status: int
    body: dict[str, Any]


class ItemRecord(_Record):
    """``session.item/1`` as admission's Item tail reads it (the full shape is
    ``shared.contracts.Item``; storage, its only producer, is checked against that in tests)."""

    schema_: schemas.ItemSchema = Field(alias="schema")
    id: str
    session_id: str
    sequence: int
    type: str


M = TypeVar("M")


@dataclass(frozen=True)
class Decoded(Generic[M]):
    model: M
    value: dict[str, Any]


class RecordType(Generic[M]):
    """What one topic carries: the model (or union of models) and the schemas it names."""

    def __init__(self, model: Any, *schemas: str) -> None:
        self.adapter: TypeAdapter[M] = TypeAdapter(model)
        self.schemas = frozenset(schemas)

    def decode(self, raw: bytes) -> Decoded[M] | Poison:
        """The typed record, or why it is poison (a ``ValidationError`` becomes the reason)."""
        value = decode_json(raw)
        if isinstance(value, Poison):
            return value
        if not isinstance(value, dict):
            return Poison(UNDECODABLE, f"not a JSON object but {type(value).__name__}")
        schema = value.get("schema")
        if not isinstance(schema, str):
            return Poison(NO_SCHEMA, "no string 'schema' field")
        if schema not in self.schemas:
            return Poison(UNEXPECTED_SCHEMA,
                          f"schema {schema[:80]!r} is not one of {sorted(self.schemas)}")
        try:
            model = self.adapter.validate_python(value)
        except ValidationError as exc:
            return Poison(INVALID_FIELDS, f"{schema}: {_reason(exc)}"[:300])
        return Decoded(model, value)


def _reason(exc: ValidationError) -> str:
    """The first problems, one line each: ``field: message``."""
    parts = []
    for e in exc.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in e["loc"]) or "record"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


ADMITTED: RecordType[AdmittedCreate | AdmittedEvent] = RecordType(Admitted, records.ADMITTED)
FACT: RecordType[Fact] = RecordType(Fact, records.FACT)
OBSERVATION: RecordType[Observation] = RecordType(Observation, records.OBSERVATION)
STORAGE_REPLY: RecordType[StorageReply] = RecordType(StorageReply, records.STORAGE_REPLY)
ITEM: RecordType[ItemRecord] = RecordType(ItemRecord, records.ITEM)
STORED: RecordType[StoredMessages | StoredResult] = RecordType(Stored, records.STORED)
REGISTRATION: RecordType[Registration] = RecordType(Registration, records.REGISTRATION)
DELIVERY: RecordType[Delivery] = RecordType(Delivery, records.DELIVERY)
CONTROL: RecordType[Control] = RecordType(Control, records.CONTROL)

TopicTypes = Mapping[str, RecordType[Any]]

"""The records admission and storage consume, as pydantic models, and the one decoder that turns
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

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from shared import records
from shared.domain.poison import (
    INVALID_FIELDS,
    NO_SCHEMA,
    UNDECODABLE,
    UNEXPECTED_SCHEMA,
    Poison,
    decode_json,
)

_CONSUMED = ConfigDict(strict=True, extra="allow", populate_by_name=True)


class _Record(BaseModel):
    model_config = _CONSUMED


class AdmittedCreate(_Record):
    """``session.admitted/1``, ``op: sessions.create`` (admission → storage)."""

    schema_: Literal["session.admitted/1"] = Field(alias="schema")
    op: Literal["sessions.create"]
    request_id: str
    session_id: str
    event_id: str
    fingerprint: str


class AdmittedEvent(_Record):
    """``session.admitted/1``, ``op: events.create``: a message or a function result."""

    schema_: Literal["session.admitted/1"] = Field(alias="schema")
    op: Literal["events.create"]
    request_id: str
    session_id: str
    event_id: str
    fingerprint: str
    event_type: str


Admitted = Annotated[AdmittedCreate | AdmittedEvent, Field(discriminator="op")]


class Fact(_Record):
    """``core.fact/1`` (dispatcher, receipt tracker → storage)."""

    schema_: Literal["core.fact/1"] = Field(alias="schema")
    fact_id: str
    session_id: str
    kind: str


class Observation(_Record):
    """``runtime.observation/1`` as storage reads it (a Runtime may send more)."""

    schema_: Literal["runtime.observation/1"] = Field(alias="schema")
    runtime_id: str
    session_id: str
    harness: str | None = None
    native: dict[str, Any] | None = None
    refusal: dict[str, Any] | None = None


class StorageReply(_Record):
    """``storage.reply/1`` (storage → admission, by ``request_id``)."""

    schema_: Literal["storage.reply/1"] = Field(alias="schema")
    request_id: str
    status: int
    body: dict[str, Any]


class ItemRecord(_Record):
    """``session.item/1`` as admission's Item tail reads it (the full shape is
    ``shared.contracts.Item``; storage, its only producer, is checked against that in tests)."""

    schema_: Literal["session.item/1"] = Field(alias="schema")
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

TopicTypes = Mapping[str, RecordType[Any]]

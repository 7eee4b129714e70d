"""The one decoder of the records Core's services consume: a record's bytes → its model of
``shared.messages`` (``Decoded``), or the reason it goes to the DLQ (``Poison``).

Strict JSON types, unknown fields kept (``shared.messages.fields.READ``); ``Decoded.value`` is the
record exactly as decoded, which is what storage journals and publishes — content is never
re-serialised on the way; ``Decoded.model`` is the typed view a consumer branches on. One
pydantic validation per record (the one exception: a delivery of a kind this code does not
know, validated a second time as its envelope — see ``DELIVERY``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import TypeAdapter, ValidationError

from shared.domain.poison import (
    INVALID_FIELDS,
    NO_SCHEMA,
    UNDECODABLE,
    UNEXPECTED_SCHEMA,
    Poison,
    decode_json,
)
from shared.messages import items, runtime, schemas
from shared.messages.internal import (
    Admitted,
    AdmittedCreate,
    AdmittedEvent,
    Fact,
    StorageReply,
    Stored,
    StoredMessages,
    StoredResult,
)

M = TypeVar("M")


@dataclass(frozen=True)
class Decoded(Generic[M]):
    model: M
    value: dict[str, Any]


class RecordType(Generic[M]):
    """What one topic carries: the record's model (or union of models) and the schemas it names.
    ``unknown_kind``: for a discriminated union, the model a record whose discriminator value is
    none of the union's decodes as (its members' common base), instead of being poison."""

    def __init__(self, model: Any, *schemas: str, unknown_kind: Any = None) -> None:
        self.model = model
        self.adapter: TypeAdapter[M] = TypeAdapter(model)
        self.schemas = frozenset(schemas)
        self.unknown_kind: TypeAdapter[M] | None = (
            None if unknown_kind is None else TypeAdapter(unknown_kind))

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
            if self.unknown_kind is None or not _unknown_tag(exc):
                return Poison(INVALID_FIELDS, f"{schema}: {_reason(exc)}"[:300])
            try:
                model = self.unknown_kind.validate_python(value)
            except ValidationError as envelope:
                return Poison(INVALID_FIELDS, f"{schema}: {_reason(envelope)}"[:300])
        return Decoded(model, value)


def _unknown_tag(exc: ValidationError) -> bool:
    """The record failed only because its discriminator names no member of the union."""
    return all(e["type"] == "union_tag_invalid" and not e["loc"]
               for e in exc.errors(include_url=False))


def _reason(exc: ValidationError) -> str:
    """The first problems, one line each: ``field: message``."""
    parts = []
    for e in exc.errors(include_url=False)[:3]:
        where = ".".join(str(p) for p in e["loc"]) or "record"
        parts.append(f"{where}: {e['msg']}")
    return "; ".join(parts)


ADMITTED: RecordType[AdmittedCreate | AdmittedEvent] = RecordType(Admitted, schemas.ADMITTED)
FACT: RecordType[Fact] = RecordType(Fact, schemas.FACT)
STORAGE_REPLY: RecordType[StorageReply] = RecordType(StorageReply, schemas.STORAGE_REPLY)
STORED: RecordType[StoredMessages | StoredResult] = RecordType(Stored, schemas.STORED)
ITEM: RecordType[items.AnyItem] = RecordType(items.Item, schemas.ITEM)
REGISTRATION: RecordType[runtime.RuntimeRegistration] = RecordType(
    runtime.RuntimeRegistration, schemas.REGISTRATION)
# A delivery of a kind this code does not know still reaches the Runtime (as its envelope),
# which refuses it: the refusal observation tells Core why the Turn fails, where the DLQ would
# leave it waiting. Every other invalid delivery is poison.
DELIVERY: RecordType[runtime.DeliveryEnvelope] = RecordType(
    runtime.RuntimeDelivery, schemas.DELIVERY, unknown_kind=runtime.DeliveryEnvelope)
OBSERVATION: RecordType[runtime.RuntimeObservation] = RecordType(
    runtime.RuntimeObservation, schemas.OBSERVATION)
CONTROL: RecordType[runtime.Control] = RecordType(runtime.Control, schemas.CONTROL)

# Every record Core consumes, by schema: the one model each is decoded with.
CONSUMED: Mapping[str, RecordType[Any]] = {
    t_schema: t for t in (ADMITTED, FACT, STORAGE_REPLY, STORED, ITEM, REGISTRATION, DELIVERY,
                          OBSERVATION, CONTROL) for t_schema in t.schemas}

TopicTypes = Mapping[str, RecordType[Any]]

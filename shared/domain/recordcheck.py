"""The hand-written record check the receipt tracker still uses (``shared.service.decode_batch``)
for ``runtime.deliveries`` and ``runtime.observations``; every other consumer decodes with the
typed models of ``shared.typedrecords``, and this module goes once the tracker does too.

What a consumer accepts from a topic, once, as data: for every record schema, the fields a
consumer reads without checking and their JSON types. A record that is not a JSON object, has no
``schema`` string, has a schema the topic does not carry, or misses / mistypes a required field
is *poison*: it goes to the topic's DLQ (``shared.kafka.DeadLetters``) and the consumer moves on.

Pure: no Kafka, no store. ``check`` returns ``None`` for an acceptable record, else a
``Poison`` with a short ``code`` (a metric label) and a human-readable ``detail``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared import records

# the codes and Poison live in shared.domain.poison; re-exported for this module's users
from shared.domain.poison import INVALID_FIELDS as INVALID_FIELDS
from shared.domain.poison import NO_SCHEMA as NO_SCHEMA
from shared.domain.poison import UNDECODABLE as UNDECODABLE
from shared.domain.poison import UNEXPECTED_SCHEMA as UNEXPECTED_SCHEMA
from shared.domain.poison import UNPROCESSABLE as UNPROCESSABLE
from shared.domain.poison import Poison as Poison
from shared.domain.poison import decode_json as decode_record

_STR = (str,)
_OBJ = (dict,)
_BOOL = (bool,)

# schema → {field: accepted JSON types}. Only what consumers index without a check.
REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {
    records.OBSERVATION: {"runtime_id": _STR, "session_id": _STR},
    records.DELIVERY: {"delivery_id": _STR, "runtime_id": _STR, "session_id": _STR,
                       "kind": _STR},
}
# Conditional requirements: (schema, field, value) → more required fields.
WHEN: dict[tuple[str, str, str], dict[str, tuple[type, ...]]] = {
    (records.DELIVERY, "kind", "function_result"): {"call_id": _STR, "success": _BOOL},
}
# Optional fields that, when present and not null, must have this type.
OPTIONAL: dict[str, dict[str, tuple[type, ...]]] = {
    records.OBSERVATION: {"native": _OBJ, "refusal": _OBJ, "harness": _STR},
}


def _type_ok(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False  # JSON true is not a number
    return isinstance(value, types)


def check(value: Any, schemas: frozenset[str]) -> Poison | None:
    """``None`` when ``value`` is a record one of ``schemas`` describes, else why not."""
    if not isinstance(value, Mapping):
        return Poison(UNDECODABLE, f"not a JSON object but {type(value).__name__}")
    schema = value.get("schema")
    if not isinstance(schema, str):
        return Poison(NO_SCHEMA, "no string 'schema' field")
    if schema not in schemas:
        return Poison(UNEXPECTED_SCHEMA,
                      f"schema {schema[:80]!r} is not one of {sorted(schemas)}")
    need = dict(REQUIRED.get(schema, {}))
    for (s, f, v), more in WHEN.items():
        if s == schema and value.get(f) == v:
            need.update(more)
    for name, types in need.items():
        if name not in value:
            return Poison(INVALID_FIELDS, f"{schema}: field {name!r} is missing")
        if not _type_ok(value[name], types):
            return Poison(INVALID_FIELDS, f"{schema}: field {name!r} must be "
                          f"{'/'.join(t.__name__ for t in types)}, "
                          f"got {type(value[name]).__name__}")
    for name, types in OPTIONAL.get(schema, {}).items():
        if value.get(name) is not None and not _type_ok(value[name], types):
            return Poison(INVALID_FIELDS, f"{schema}: field {name!r} must be "
                          f"{'/'.join(t.__name__ for t in types)} or null, "
                          f"got {type(value[name]).__name__}")
    return None


def accept(raw: bytes, schemas: frozenset[str]) -> dict[str, Any] | Poison:
    """Decode and check one record value: the record, or why it is poison."""
    value = decode_record(raw)
    if isinstance(value, Poison):
        return value
    problem = check(value, schemas)
    if problem is not None:
        return problem
    assert isinstance(value, dict)
    return value

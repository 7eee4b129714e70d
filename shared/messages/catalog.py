"""Every record schema → its one model (a class, or a discriminated union of classes): what
consumers decode with (``shared.messages.decode``), what builders are checked against, and —
for the public topics — what ``docs/schemas/`` and ``docs/asyncapi.json`` are generated from
(``shared.messages.generate``). tests/unit/test_one_model_per_record.py fails when a second
model of a record appears anywhere in the product code."""

from __future__ import annotations

from typing import Any

from shared.messages import deadletter, inputs, internal, items, runtime, schemas

MODELS: dict[str, Any] = {
    schemas.INPUT: inputs.SessionInputRecord,
    schemas.INPUT_RESULT: inputs.SessionInputResult,
    schemas.ITEM: items.Item,
    schemas.ADMITTED: internal.Admitted,
    schemas.STORAGE_REPLY: internal.StorageReply,
    schemas.STORED: internal.Stored,
    schemas.FACT: internal.Fact,
    schemas.REGISTRATION: runtime.RuntimeRegistration,
    schemas.DELIVERY: runtime.RuntimeDelivery,
    schemas.OBSERVATION: runtime.RuntimeObservation,
    schemas.CONTROL: runtime.Control,
    schemas.DEAD_LETTER: deadletter.DeadLetter,
}

# The public topics' records, by the name of their generated schema (docs/schemas/<name>.json).
PUBLIC: dict[str, Any] = {
    "session.input": MODELS[schemas.INPUT],
    "session.input.results": MODELS[schemas.INPUT_RESULT],
    "session.items": MODELS[schemas.ITEM],
    "runtime.registrations": MODELS[schemas.REGISTRATION],
    "runtime.deliveries": MODELS[schemas.DELIVERY],
    "runtime.observations": MODELS[schemas.OBSERVATION],
    "dlq": MODELS[schemas.DEAD_LETTER],
}

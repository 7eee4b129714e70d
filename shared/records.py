"""Internal record schemas (the public ones are in CONTRACT §2). Every record is JSON with a
``schema`` field. The names live here so producers and consumers agree; so do the envelopes
storage puts around what it publishes (``item_record``, ``stored_record``). The bodies are built
by the domain: ``session.admitted/1`` by ``shared.domain.validation`` (``admitted_record``),
``runtime.delivery/1`` by ``shared.domain.delivery``, decisions by ``shared.domain.sessions``."""

from __future__ import annotations

from typing import Any

ADMITTED = "session.admitted/1"  # admission → storage
STORAGE_REPLY = "storage.reply/1"  # storage → admission, by request_id
STORED = "session.stored/1"  # storage → dispatcher: durable input to deliver
FACT = "core.fact/1"  # dispatcher / receipt tracker → storage
ITEM = "session.item/1"  # storage → consumers (public)
INPUT_RESULT = "session.input.result/1"  # admission → event producers (public)
REGISTRATION = "runtime.registration/1"
DELIVERY = "runtime.delivery/1"
OBSERVATION = "runtime.observation/1"
CONTROL = "runtime.control/1"  # test/ops control record for the reference runtime

OP_CREATE = "sessions.create"
OP_EVENT = "events.create"
EV_MESSAGE = "agent.session.input.message"
EV_TOOL_RESULT = "agent.session.input.tool_result"

# core.fact/1 kinds beyond turn / function_call / application / binding: a Runtime refused a
# steer because its native Turn had already ended (dispatcher → storage; sessions.py)
FACT_STEER_REFUSED = "steer_refused"

# The envelope an Item carries on ``session.items`` and not in HTTP bodies.
ITEM_TOPIC_ONLY = ("schema", "tenant")


def item_record(item: dict[str, Any], tenant: str) -> dict[str, Any]:
    """A public Item as published on ``session.items``: named by schema and by its Session's
    tenant, so a multi-tenant consumer can route it without a lookup."""
    return {"schema": ITEM, "tenant": tenant, **item}


def stored_record(stored: dict[str, Any]) -> dict[str, Any]:
    """A decided input as published on ``session.stored`` (its body:
    ``shared.domain.sessions.stored_input``, or replayed from the journal)."""
    return {"schema": STORED, **stored}


def public_item(record: dict[str, Any]) -> dict[str, Any]:
    """The Item as the HTTP API shows it (one tenant's own view): the topic envelope removed."""
    return {k: v for k, v in record.items() if k not in ITEM_TOPIC_ONLY}

"""Record builders. Every record is JSON with a ``schema`` field; each record has one model in
``shared.messages`` (the public ones are CONTRACT §2), which its consumers decode with and these
builders are checked against (tests/unit/test_builders_match_models.py). The names live here
(imported: each is spelled once, in ``shared.messages.schemas``) so producers and consumers
agree; so do the envelopes built here (``item_record``, ``stored_record``, ``fact_record``,
``observation_record``, ``registration_record``, ``control_record`` — check the functions
below). The bodies are built
by the domain: ``session.admitted/1`` by ``services.admission.domain.validation``
(``admitted_record``), ``runtime.delivery/1`` by ``shared.domain.wire``, decisions by
``services.storage.domain.sessions``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from shared.messages import schemas

# the schema names, spelled once in shared.messages.schemas
ADMITTED = schemas.ADMITTED  # admission → storage
STORAGE_REPLY = schemas.STORAGE_REPLY  # storage → admission, by request_id
STORED = schemas.STORED  # storage → dispatcher: durable input to deliver
FACT = schemas.FACT  # dispatcher / receipt tracker → storage
ITEM = schemas.ITEM  # storage → consumers (public)
INPUT_RESULT = schemas.INPUT_RESULT  # admission → event producers (public)
REGISTRATION = schemas.REGISTRATION
DELIVERY = schemas.DELIVERY
OBSERVATION = schemas.OBSERVATION
CONTROL = schemas.CONTROL  # test/ops control record for the reference runtime

OP_CREATE = "sessions.create"
OP_EVENT = "events.create"
EV_MESSAGE = "agent.session.input.message"
EV_TOOL_RESULT = "agent.session.input.tool_result"

# core.fact/1 kinds beyond turn / function_call / application / binding: a Runtime refused a
# steer because its native Turn had already ended (dispatcher → storage; sessions.py)
FACT_STEER_REFUSED = "steer_refused"

# The envelope an Item carries on ``session.items`` and not in HTTP bodies.
ITEM_TOPIC_ONLY = ("schema", "tenant")


def parse_time(value: str) -> datetime:
    """A record's timestamp (a registration's ``heartbeat_at``): RFC 3339 (``Z`` or an offset)
    → an aware datetime."""
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without a time zone: {value!r}")
    return parsed


def item_record(item: dict[str, Any], tenant: str) -> dict[str, Any]:
    """A public Item as published on ``session.items``: named by schema and by its Session's
    tenant, so a multi-tenant consumer can route it without a lookup."""
    return {"schema": ITEM, "tenant": tenant, **item}


def stored_record(stored: dict[str, Any]) -> dict[str, Any]:
    """A decided input as published on ``session.stored`` (its body:
    ``services.storage.domain.sessions.stored_input``, or replayed from the journal)."""
    return {"schema": STORED, **stored}


def public_item(record: dict[str, Any]) -> dict[str, Any]:
    """The Item as the HTTP API shows it (one tenant's own view): the topic envelope removed."""
    return {k: v for k, v in record.items() if k not in ITEM_TOPIC_ONLY}


def fact_record(session_id: str, fact_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """A ``core.fact/1`` (dispatcher, receipt tracker → storage): ``body`` names its ``kind``
    and that kind's fields; ``fact_id`` makes a redelivered fact a duplicate."""
    return {"schema": FACT, "fact_id": fact_id, "session_id": session_id, **body}


def observation_record(*, runtime_id: str, session_id: str, harness: str,
                       native: dict[str, Any] | None, turn_id: str | None,
                       observation_id: str, observed_at: str | None = None) -> dict[str, Any]:
    """A ``runtime.observation/1``: one native record as the harness printed it (``native``),
    or ``None`` for a refusal, which the caller adds as ``refusal``. ``observed_at`` (which the
    contract requires): given, or left to the publisher, which stamps it as it sends (the
    Runtime's outbox, ``runtimes.outbox``)."""
    rec = {"schema": OBSERVATION, "runtime_id": runtime_id, "session_id": session_id,
           "harness": harness, "native": native, "turn_id": turn_id,
           "observation_id": observation_id}
    if observed_at is not None:
        rec["observed_at"] = observed_at
    return rec


def registration_record(*, runtime_id: str, harness: str, bridge_protocol: int,
                        placements: list[str], message_images: bool,
                        function_result_images: bool, status: str, heartbeat_at: str,
                        sealed_key: str | None = None, **extra: Any) -> dict[str, Any]:
    """A ``runtime.registration/1`` (CONTRACT §2); ``extra`` fields are informative only.
    ``sealed_key``: the Runtime's public key, for sealed deliveries (``shared.sealing``)."""
    caps: dict[str, Any] = {"message_images": message_images,
                            "function_result_images": function_result_images}
    if sealed_key is not None:
        caps["sealed_deliveries"] = {"alg": schemas.SEALING_ALG, "key": sealed_key}
    return {
        "schema": REGISTRATION,
        "runtime_id": runtime_id,
        "harness": harness,
        "bridge_protocol": bridge_protocol,
        "placements": list(placements),
        "capabilities": caps,
        "status": status,
        "heartbeat_at": heartbeat_at,
        **extra,
    }


def control_record(runtime_id: str, changes: dict[str, Any]) -> dict[str, Any]:
    """A ``runtime.control/1``: switches (and ``status``) to set on one reference Runtime."""
    return {"schema": CONTROL, "runtime_id": runtime_id, "set": changes}

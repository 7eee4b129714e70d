"""The ``session.input`` topic read as the HTTP API's twin: a record is addressed by its
``request_id`` (or is poison), its envelope names the operation and the tenant, and the same
``Admission`` use case answers it; the answer goes to ``session.input.results``."""

from __future__ import annotations

from typing import Any

from services.admission.core import Admission, Answer, body_too_large
from services.admission.domain.jsonbody import parse_json
from shared import records
from shared.domain import errors
from shared.domain.poison import INVALID_FIELDS, UNDECODABLE, Poison
from shared.domain.tenancy import DEFAULT_TENANT, TENANT_RE, is_tenant

ENVELOPE = ("op", "request_id", "session_id", "schema", "tenant")


def addressed(raw: bytes) -> dict[str, Any] | Poison:
    """The record as a JSON object with a string ``request_id``, or poison: a record that
    cannot be answered (not JSON, not an object, no string ``request_id``)."""
    return addressed_value(parse_json(raw))


def addressed_value(value: Any) -> dict[str, Any] | Poison:
    """``addressed`` of a record already parsed (``parse_json``'s value or error)."""
    if isinstance(value, errors.ApiError):
        return Poison(UNDECODABLE, value.message)
    if not isinstance(value, dict) or not isinstance(value.get("request_id"), str):
        return Poison(UNDECODABLE if not isinstance(value, dict) else INVALID_FIELDS,
                      "no string request_id: the answer could not be addressed")
    return value


def wrong_tenant(value: dict[str, Any], topic_tenant: str | None) -> str | None:
    """Why a record of a tenant's own input topic is refused — it names another tenant — or
    None. On ``session.input.<tenant>`` the tenant is the topic's (the broker's ACLs let only
    that tenant's principals write there); a ``tenant`` field may repeat it, never change it."""
    if topic_tenant is None or "tenant" not in value or value["tenant"] == topic_tenant:
        return None
    return (f"the record names tenant {str(value['tenant'])[:64]!r} on the input topic of "
            f"tenant {topic_tenant!r}: a record there is that tenant's")


async def answer(admission: Admission, value: dict[str, Any], size: int,
                 max_body_bytes: int, topic_tenant: str | None = None) -> Answer:
    """What the HTTP API would answer; a 400 when the record is not a valid request.
    ``topic_tenant``: the tenant whose own input topic the record was read from (None: the
    shared ``session.input``)."""
    if size > max_body_bytes:
        return Answer.error(body_too_large(max_body_bytes))
    op = value.get("op")
    body = {k: v for k, v in value.items() if k not in ENVELOPE}
    why = wrong_tenant(value, topic_tenant)
    if why is not None:
        return Answer.error(errors.invalid(why, "tenant"))
    # On a tenant's own topic the tenant is the topic's. Producers of the shared topic are
    # trusted by Kafka ACLs to act for any tenant: a record names its tenant, or belongs to
    # the default tenant (docs/security.md).
    tenant = topic_tenant if topic_tenant is not None else value.get("tenant", DEFAULT_TENANT)
    if not is_tenant(tenant):
        return Answer.error(errors.invalid(f"tenant must match {TENANT_RE.pattern}", "tenant"))
    if op == records.OP_CREATE:
        return await admission.create_session(body, tenant=tenant)
    if op == records.OP_EVENT:
        sid = value.get("session_id")
        if not isinstance(sid, str):
            return Answer.error(errors.invalid("session_id is required", "session_id"))
        return await admission.add_event(sid, body, tenant=tenant)
    return Answer.error(errors.invalid("op must be 'sessions.create' or 'events.create'", "op"))


def result(request_id: str, got: Answer) -> dict[str, Any]:
    return {"schema": records.INPUT_RESULT, "request_id": request_id,
            "status": got.status, "body": got.body}

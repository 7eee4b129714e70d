"""Why a record leaves its topic unprocessed: a ``Poison`` with a short ``code`` (the DLQ
metric's label, low cardinality) and a human-readable ``detail`` (the reason the DLQ record
carries). Pure: no Kafka."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

UNDECODABLE = "undecodable"  # not UTF-8 JSON, or not an object
NO_SCHEMA = "missing_schema"  # no string ``schema`` field
UNEXPECTED_SCHEMA = "unexpected_schema"  # a schema this topic does not carry
INVALID_FIELDS = "invalid_fields"  # a required field missing or of the wrong type
UNPROCESSABLE = "unprocessable"  # well-formed, but the consumer could not process it
# well-formed, but too large for the store's document or a topic's record (shared/failures.py)
TOO_LARGE = "too_large"
# an observation from a Runtime its Session is not bound to (services/storage/handler.py)
NOT_BOUND = "not_bound_runtime"
# a record on a tenant's own input topic that names another tenant (services/admission)
WRONG_TENANT = "wrong_tenant"
# a sealed delivery Core's seal key does not open (services/receipts, shared/sealing.py)
UNSEALABLE = "unsealable"


@dataclass(frozen=True)
class Poison:
    code: str
    detail: str


def decode_json(raw: bytes) -> Any | Poison:
    """UTF-8 JSON or a Poison; no NaN/Infinity (they are not JSON)."""
    try:
        return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        return Poison(UNDECODABLE, f"not UTF-8 JSON: {exc}"[:300])


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")

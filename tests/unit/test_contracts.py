"""The generated contract documents (``docs/schemas/*.json``, ``docs/asyncapi.json``) equal what
the code generates: regenerate with ``python -m shared.messages.generate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared.messages import asyncapi, generate

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", sorted(generate.SCHEMAS))
def test_checked_in_schema_equals_the_generated_one(name: str) -> None:
    path = DOCS / "schemas" / f"{name}.json"
    assert path.read_text() == generate.rendered(name), \
        f"{path} drifted: run python -m shared.messages.generate"


def test_checked_in_asyncapi_equals_the_generated_one() -> None:
    assert (DOCS / "asyncapi.json").read_text() == asyncapi.rendered(), \
        "docs/asyncapi.json drifted: run python -m shared.messages.generate"


def test_asyncapi_payloads_are_the_contract_models_not_empty() -> None:
    doc = json.loads((DOCS / "asyncapi.json").read_text())
    schemas = doc["components"]["schemas"]
    for model in ("MessageItem", "TurnItem", "FunctionResultDelivery", "RuntimeRegistration",
                  "SessionsCreateRecord", "SessionInputResult", "RuntimeObservation"):
        assert schemas[model]["properties"], model
    channels = {c["address"] for c in doc["channels"].values()}
    assert {"session.input", "session.input.results", "session.items", "runtime.deliveries",
            "runtime.registrations", "runtime.observations"} <= channels


def test_item_union_is_discriminated_on_type() -> None:
    schema = generate.json_schema("session.items")
    assert schema["discriminator"]["propertyName"] == "type"
    assert set(schema["discriminator"]["mapping"]) == {
        "message", "function_call", "function_call_output", "function_call_application", "turn"}


async def test_items_name_their_tenant_on_the_topic_and_not_over_http() -> None:
    """The Item record on ``session.items`` carries the Session's tenant and validates against
    the published schema; what admission's Item tail hands its SSE streams and waits is the
    HTTP Item, without the topic envelope."""
    from jsonschema import Draft202012Validator

    from services.admission.tails import ItemTail
    from shared import records
    from shared.settings import Settings

    item = {"id": "item_" + "a" * 32, "session_id": "session_" + "b" * 32, "sequence": 1,
            "type": "turn", "created_at": "2026-11-30T10:00:00Z", "turn_id": "turn_1",
            "state": "started", "reason": None}
    record = records.item_record(item, "acme")
    assert record["tenant"] == "acme" and record["schema"] == records.ITEM
    schema = json.loads((DOCS / "schemas" / "session.items.json").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(record))
    tail = ItemTail(Settings(), "t.session.items", dlq=None)  # type: ignore[arg-type]
    q = tail.listen(item["session_id"])
    tail.dispatch(record)
    assert q.get_nowait() == item

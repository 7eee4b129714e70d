"""The generated contract documents (``docs/schemas/*.json``, ``docs/asyncapi.json``) equal what
the code generates: regenerate with ``python -m shared.contracts``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shared import asyncapi, contracts

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize("name", sorted(contracts.SCHEMAS))
def test_checked_in_schema_equals_the_generated_one(name: str) -> None:
    path = DOCS / "schemas" / f"{name}.json"
    assert path.read_text() == contracts.rendered(name), \
        f"{path} drifted: run python -m shared.contracts"


def test_checked_in_asyncapi_equals_the_generated_one() -> None:
    assert (DOCS / "asyncapi.json").read_text() == asyncapi.rendered(), \
        "docs/asyncapi.json drifted: run python -m shared.contracts"


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
    schema = contracts.json_schema("session.items")
    assert schema["discriminator"]["propertyName"] == "type"
    assert set(schema["discriminator"]["mapping"]) == {
        "message", "function_call", "function_call_output", "function_call_application", "turn"}

"""The OpenAPI document the admission app serves equals the checked-in ``docs/openapi.json`` and
describes every path of CONTRACT §1 with its request body, success and error answers.
Regenerate with ``python -m services.admission.openapi > docs/openapi.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.admission.http import build_http_app
from shared.settings import Settings

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"

CONTRACT = {  # CONTRACT §1: method and path → success status
    ("post", "/v1/sessions"): "201",
    ("post", "/v1/sessions/{session_id}/events"): "202",
    ("get", "/v1/sessions/{session_id}"): "200",
    ("get", "/v1/sessions/{session_id}/items"): "200",
    ("get", "/v1/sessions/{session_id}/tool_results/{call_id}"): "200",
    ("get", "/healthz"): "200",
    ("get", "/readyz"): "200",
    ("get", "/metrics"): "200",
}


async def _ready() -> bool:
    return True


@pytest.fixture
async def served() -> dict[str, Any]:
    app = build_http_app(Settings(auth_disabled=True), lambda: None, _ready)  # type: ignore[arg-type,return-value]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://core") as client:
        r = await client.get("/openapi.json")
    assert r.status_code == 200
    doc: dict[str, Any] = r.json()
    return doc


async def test_served_document_equals_the_checked_in_file(served: dict[str, Any]) -> None:
    assert served == json.loads(DOC.read_text(encoding="utf-8")), (
        "docs/openapi.json is stale: python -m services.admission.openapi > docs/openapi.json")


@pytest.mark.parametrize(("method", "path"), sorted(CONTRACT))
async def test_every_contract_path_is_described(served: dict[str, Any], method: str,
                                                path: str) -> None:
    op = served["paths"][path][method]
    assert CONTRACT[(method, path)] in op["responses"]
    if path.startswith("/v1/"):
        assert {"400", "404"} <= set(op["responses"]) or path == "/v1/sessions"
        err = op["responses"]["400"]["content"]["application/json"]["schema"]
        assert err == {"$ref": "#/components/schemas/Error"}
    if method == "post":
        assert op["requestBody"]["required"] is True
        assert "413" in op["responses"]


def test_no_undocumented_paths(served: dict[str, Any]) -> None:
    described = {(m, p) for p, ops in served["paths"].items() for m in ops}
    assert described == set(CONTRACT)


def _refs(value: Any) -> set[str]:
    if isinstance(value, dict):
        out = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        for v in value.values():
            out |= _refs(v)
        return out
    if isinstance(value, list):
        return set().union(*(_refs(v) for v in value)) if value else set()
    return set()


def test_request_bodies_are_the_content_models(served: dict[str, Any]) -> None:
    schemas = served["components"]["schemas"]
    for ref in _refs(served):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    create = served["paths"]["/v1/sessions"]["post"]["requestBody"]["content"][
        "application/json"]["schema"]
    assert create == {"$ref": "#/components/schemas/CreateSessionBody"}
    assert schemas["CreateSessionBody"]["additionalProperties"] is False
    assert set(schemas["CreateSessionBody"]["required"]) == {"harness", "placement", "input"}
    event = served["paths"]["/v1/sessions/{session_id}/events"]["post"]["requestBody"][
        "content"]["application/json"]["schema"]
    assert {r["$ref"] for r in event["oneOf"]} == {
        "#/components/schemas/MessageEventBody", "#/components/schemas/ToolResultEventBody"}
    assert schemas["InputImage"]["properties"]["image_url"]["pattern"].startswith(
        "^data:image/(png|jpeg);base64,")
    assert set(schemas["EventAccepted"]["properties"]["delivery"]["enum"]) == {
        "started", "steered", "resumed", "duplicate"}

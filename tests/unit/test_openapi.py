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


def test_operations_have_short_stable_ids_and_tags(served: dict[str, Any]) -> None:
    ids = {(m, p): op["operationId"] for p, ops in served["paths"].items()
           for m, op in ops.items()}
    assert ids == {
        ("post", "/v1/sessions"): "createSession",
        ("post", "/v1/sessions/{session_id}/events"): "addEvent",
        ("get", "/v1/sessions/{session_id}"): "getSession",
        ("get", "/v1/sessions/{session_id}/items"): "listItems",
        ("get", "/v1/sessions/{session_id}/tool_results/{call_id}"): "getToolResult",
        ("get", "/healthz"): "getLiveness",
        ("get", "/readyz"): "getReadiness",
        ("get", "/metrics"): "getMetrics",
    }
    declared = {t["name"] for t in served["tags"]}
    for ops in served["paths"].values():
        for op in ops.values():
            assert op["tags"] and set(op["tags"]) <= declared, op["operationId"]


def test_answers_are_the_contract_models(served: dict[str, Any]) -> None:
    """Each success answer is a pydantic model of services.admission.answers; states are enums;
    Items are one discriminated union without the topic-only fields."""
    from services.admission import answers

    schemas = served["components"]["schemas"]
    for model in (answers.SessionCreated, answers.EventAccepted, answers.Session,
                  answers.ItemPage, answers.ToolResult, answers.Error):
        assert set(schemas[model.__name__]["properties"]) == {
            f.alias or name for name, f in model.model_fields.items()}, model.__name__
    assert schemas["Session"]["properties"]["status"]["enum"] == ["waiting_for_runtime", "bound"]
    assert set(schemas["ToolResult"]["properties"]["state"]["enum"]) == {
        "open", "pending", "applied", "uncertain", "failed"}
    assert schemas["TurnItem"]["properties"]["state"]["enum"] == ["started", "completed",
                                                                  "failed"]
    assert schemas["Item"]["discriminator"]["propertyName"] == "type"
    assert schemas["ItemPage"]["properties"]["items"]["items"] == {
        "$ref": "#/components/schemas/Item"}
    names = list(schemas["Item"]["discriminator"]["mapping"].values())
    message = schemas["AnyMessageItem"]  # the message Items, by role
    assert message["discriminator"]["propertyName"] == "role"
    names += list(message["discriminator"]["mapping"].values())
    names.remove("#/components/schemas/AnyMessageItem")
    assert {"#/components/schemas/MessageItem", "#/components/schemas/AgentMessageItem"} <= set(
        names)
    for name in names:
        item = schemas[name.removeprefix("#/components/schemas/")]
        assert item["additionalProperties"] is False
        assert not {"schema", "tenant"} & set(item["properties"]), name
    error = schemas["ErrorDetail"]["properties"]["type"]
    assert "not_found" in error["enum"] and "rate_limited" in error["enum"]


def test_server_sent_events_are_documented_with_their_id(served: dict[str, Any]) -> None:
    for path, method in (("/v1/sessions", "post"), ("/v1/sessions/{session_id}/items", "get")):
        op = served["paths"][path][method]
        ok = op["responses"]["201" if method == "post" else "200"]["content"]
        sse = ok["text/event-stream"]
        assert "`id: <sequence>`" in sse["schema"]["description"], path
        assert sse["example"].startswith("id: ")
    params = served["paths"]["/v1/sessions/{session_id}/items"]["get"]["parameters"]
    assert {p["name"] for p in params if p["in"] == "header"} == {"Last-Event-ID"}

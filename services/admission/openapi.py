"""The OpenAPI document of CONTRACT §1. The handlers read raw bodies (strict JSON parsing, the
domain validator), so FastAPI cannot infer their shapes: request bodies come from the pydantic
models of ``shared.domain.content``, answers from those of ``services.admission.answers`` (an
Item is the record model of ``shared.messages.items``), and each operation is described below.

``python -m services.admission.openapi > docs/openapi.json`` writes the checked-in copy;
``tests/unit/test_openapi.py`` checks that the served document equals it."""

from __future__ import annotations

import json
import sys
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter
from pydantic.json_schema import models_json_schema

from services.admission import answers
from shared.domain.content import (
    CreateSessionBody,
    MessageEventBody,
    ToolResultEventBody,
)
from shared.messages import generate, items

Json = dict[str, Any]
REF = "#/components/schemas/{model}"


def _ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


_ID = {"type": "string", "pattern": "^[a-z]+_[0-9a-f]{32}$"}

# The answers' bodies (services.admission.answers), rendered as served (serialization mode).
RESPONSE_MODELS = (answers.Error, answers.SessionCreated, answers.EventAccepted,
                   answers.Session, answers.ItemPage, answers.ToolResult,
                   answers.Health)
REQUEST_MODELS = (CreateSessionBody, MessageEventBody, ToolResultEventBody)
# Fields an Item carries on the topic only (shared.records.ITEM_TOPIC_ONLY): an HTTP answer
# that held one would not conform.
_TOPIC_ONLY = ("schema", "tenant")
_SSE_ITEM = ("`event: item`, `id: <sequence>`, `data: <Item>` (an Item as in "
             "`#/components/schemas/Item`)")


def _sse(description: str) -> Json:
    return {"schema": {"type": "string", "description": description},
            "example": 'id: 3\nevent: item\ndata: {"id": "item_…", "sequence": 3, '
                       '"type": "turn", …}\n\n'}


def _json(schema: Json, description: str) -> Json:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> Json:
    text = {400: "invalid_request or unsupported_or_invalid_configuration",
            401: "missing or wrong bearer API key",
            404: "not_found (also for a Session of another tenant)", 409: "conflict",
            413: "request_too_large",
            429: "rate_limited: the tenant's requests in flight, or the concurrent waits (per "
                 "replica, per tenant), are at their cap; retry after Retry-After seconds",
            503: "unavailable: the store or the broker is unreachable (Retry-After)",
            504: "storage did not answer in time"}
    out = {str(c): _json(_ref("Error"), text[c]) for c in codes}
    for code in (429, 503):
        if code in codes:
            out[str(code)]["headers"] = {"Retry-After": {"schema": {"type": "integer"},
                                                         "description": "seconds"}}
    return out


def _body(schema: Json) -> Json:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


_SESSION_ID = {"name": "session_id", "in": "path", "required": True, "schema": _ID}
_WAIT = [
    {"name": "wait", "in": "query", "required": False,
     "schema": {"type": "boolean", "default": False},
     "description": "answer when the Turn the input started or joined is terminal (200, every "
                    "Item of the Turn from the input on) or the budget runs out (202, the Items "
                    "so far; the Turn goes on). Concurrent waits are bounded per replica and "
                    "per tenant: past the bound, 429 with Retry-After, and nothing is admitted."},
    {"name": "timeout_ms", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 1, "default": 120000},
     "description": "the wait budget in milliseconds, capped at 600000: a larger value is "
                    "clamped to 600000, never refused; below 1 or not a decimal integer → 400 "
                    "(param timeout_ms)"},
]

OPERATIONS: dict[tuple[str, str], Json] = {
    ("/v1/sessions", "post"): {
        "operationId": "createSession",
        "tags": ["sessions"],
        "summary": "Create a Session with its first input",
        "parameters": _WAIT,
        "requestBody": _body(_ref("CreateSessionBody")),
        "responses": {"201": {"description": "the Session and its Items; with `\"stream\": "
                                             "true` in the body, Server-Sent Events instead",
                              "content": {
                                  "application/json": {"schema": _ref("SessionCreated")},
                                  "text/event-stream": _sse(
                                      "first `event: session` (`data`: the SessionCreated "
                                      "body without `items`), then every Item of the Session "
                                      f"in sequence order as {_SSE_ITEM}")}},
                      "200": _json(_ref("SessionCreated"), "wait=true: the first Turn ended"),
                      "202": _json(_ref("SessionCreated"),
                                   "wait=true: the budget ran out (Items so far)"),
                      **_errors(400, 401, 409, 413, 429, 503, 504)},
    },
    ("/v1/sessions/{session_id}/events", "post"): {
        "operationId": "addEvent",
        "tags": ["events"],
        "summary": "Add one event: a message, or a function result (submitting a result is "
                   "this operation with `type: agent.session.input.tool_result`)",
        "parameters": [
            _SESSION_ID,
            *_WAIT,
        ],
        "requestBody": _body({"oneOf": [_ref("MessageEventBody"), _ref("ToolResultEventBody")],
                              "discriminator": {"propertyName": "type"}}),
        "responses": {"202": _json(_ref("EventAccepted"), "accepted (Items so far)"),
                      "200": _json(_ref("EventAccepted"), "wait=true: the Turn ended"),
                      **_errors(400, 401, 404, 409, 413, 429, 503, 504)},
    },
    ("/v1/sessions/{session_id}", "get"): {
        "operationId": "getSession",
        "tags": ["sessions"],
        "summary": "The Session: harness, placement, binding, status",
        "parameters": [_SESSION_ID],
        "responses": {"200": _json(_ref("Session"), "the Session"),
                      **_errors(400, 401, 404, 429, 503)},
    },
    ("/v1/sessions/{session_id}/items", "get"): {
        "operationId": "listItems",
        "tags": ["items"],
        "summary": "Public Items in sequence order; with stream=true, follow them as SSE",
        "description": (
            "Without `stream`: a page of stored Items (recovery read). With `stream=true`: the "
            "stored Items after `after`, then each Item as it is published, as Server-Sent "
            f"Events ({_SSE_ITEM}), in sequence order with no gap and no repeat; a "
            "reconnecting client sends `Last-Event-ID` (the last sequence it saw), which takes "
            "precedence over `after`."),
        "parameters": [
            _SESSION_ID,
            {"name": "after", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 0, "default": 0}},
            {"name": "limit", "in": "query", "required": False,
             "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}},
            {"name": "stream", "in": "query", "required": False,
             "schema": {"type": "boolean", "default": False}},
            {"name": "Last-Event-ID", "in": "header", "required": False,
             "schema": {"type": "string", "pattern": "^[0-9]+$"}},
        ],
        "responses": {"200": {"description": "a page of Items, or (stream=true) an SSE stream",
                              "content": {"application/json": {"schema": _ref("ItemPage")},
                                          "text/event-stream": _sse(
                                              f"every Item after the position as {_SSE_ITEM}; "
                                              "`: keep-alive` comments while idle")}},
                      **_errors(400, 401, 404, 429, 503)},
    },
    ("/v1/sessions/{session_id}/tool_results/{call_id}", "get"): {
        "operationId": "getToolResult",
        "tags": ["function calls"],
        "summary": "A function call, its stored submission and its application state",
        "parameters": [_SESSION_ID, {"name": "call_id", "in": "path", "required": True,
                                     "schema": {"type": "string"}}],
        "responses": {"200": _json(_ref("ToolResult"), "the call"),
                      **_errors(400, 401, 404, 429, 503)},
    },
    ("/healthz", "get"): {"operationId": "getLiveness", "tags": ["operations"],
                          "summary": "Liveness", "security": [],
                          "responses": {"200": _json(_ref("Health"), "alive")}},
    ("/readyz", "get"): {"operationId": "getReadiness", "tags": ["operations"],
                         "summary": "Readiness: Kafka and the store reachable", "security": [],
                         "responses": {"200": _json(_ref("Health"), "ready"),
                                       "503": _json(_ref("Health"), "not ready")}},
    ("/metrics", "get"): {"operationId": "getMetrics", "tags": ["operations"],
                          "summary": "Prometheus metrics, less the samples that name a tenant "
                                     "(the metrics port serves those)", "security": [],
                          "responses": {"200": {"description": "metrics",
                                                "content": {"text/plain": {"schema":
                                                                           {"type": "string"}}}}}},
}
TAGS = [
    {"name": "sessions", "description": "create a Session, read its state"},
    {"name": "events", "description": "messages and function results into a Session"},
    {"name": "items", "description": "a Session's public Items: pages, or followed as SSE"},
    {"name": "function calls", "description": "a call's submission and application state"},
    {"name": "operations", "description": "liveness, readiness, metrics"},
]


def component_schemas() -> dict[str, Json]:
    """Request bodies as validated, answers as served, from the same pydantic models; the Item
    union is one named schema (``Item``, discriminated by ``type``)."""
    _, top = models_json_schema(
        [(m, "validation") for m in REQUEST_MODELS]
        + [(m, "serialization") for m in RESPONSE_MODELS],
        ref_template=REF,
    )
    defs: dict[str, Json] = top["$defs"]
    union = TypeAdapter(items.Item).json_schema(ref_template=REF, mode="serialization")
    union.pop("$defs", None)
    defs = {name: _named(schema, union) for name, schema in defs.items()}
    for name in ("MessageItem", "AgentMessageItem", "FunctionCallItem", "FunctionCallOutputItem",
                 "FunctionCallApplicationItem", "TurnItem"):
        for field in _TOPIC_ONLY:
            defs[name]["properties"].pop(field, None)
    union = generate.name_nested_unions(union, defs, REF)
    defs["Item"] = {**union, "description": "A public Item (CONTRACT §2), by `type` (and a "
                    "message by `role`)."}
    return dict(sorted(defs.items()))


def _named(value: Any, union: Json) -> Any:
    """``value`` with every inline copy of the Item union replaced by a reference to it."""
    if value == union:
        return _ref("Item")
    if isinstance(value, dict):
        return {k: _named(v, union) for k, v in value.items()}
    if isinstance(value, list):
        return [_named(v, union) for v in value]
    return value


def build_document(app: FastAPI) -> Json:
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes)
    for (path, method), op in OPERATIONS.items():
        target = doc["paths"][path][method]
        target.pop("parameters", None)
        target.update(op)
    doc["components"] = {
        "schemas": component_schemas(),
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    }
    doc["security"] = [{"bearer": []}]
    doc["tags"] = TAGS
    return doc


def install(app: FastAPI) -> None:
    """Serve the described document at ``/openapi.json`` (built once, then cached)."""

    def openapi() -> Json:
        if app.openapi_schema is None:
            app.openapi_schema = build_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def main() -> None:
    from services.admission.http import build_http_app
    from shared.settings import Settings

    async def ready() -> bool:
        return True

    app = build_http_app(Settings(), lambda: None, ready)  # type: ignore[arg-type,return-value]
    sys.stdout.write(json.dumps(app.openapi(), indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

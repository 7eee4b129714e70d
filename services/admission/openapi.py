"""The OpenAPI document of CONTRACT §1. The handlers read raw bodies (strict JSON parsing, the
domain validator), so FastAPI cannot infer their shapes: request bodies come from the pydantic
models of ``shared.domain.content`` and responses from the schemas below.

``python -m services.admission.openapi > docs/openapi.json`` writes the checked-in copy;
``tests/unit/test_openapi.py`` checks that the served document equals it."""

from __future__ import annotations

import json
import sys
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from shared.domain.content import (
    CreateSessionBody,
    MessageEventBody,
    ToolResultEventBody,
)

Json = dict[str, Any]
REF = "#/components/schemas/{model}"


def _ref(name: str) -> Json:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(schema: Json) -> Json:
    return {"anyOf": [schema, {"type": "null"}]}


_ID = {"type": "string", "pattern": "^[a-z]+_[0-9a-f]{32}$"}
_CONTENT = {"type": "array", "items": {"oneOf": [_ref("InputText"), _ref("InputImage")]}}

RESPONSE_SCHEMAS: dict[str, Json] = {
    "Error": {
        "type": "object", "required": ["error"],
        "properties": {"error": {
            "type": "object", "required": ["type", "message", "param"],
            "properties": {
                "type": {"type": "string", "enum": [
                    "invalid_request", "unsupported_or_invalid_configuration", "not_found",
                    "conflict", "request_too_large", "rate_limited", "unauthorized", "timeout",
                    "internal_error", "unavailable"]},
                "message": {"type": "string"},
                "param": _nullable({"type": "string"}),
            }}},
    },
    "Item": {
        "type": "object",
        "description": "A public Item (CONTRACT §2). `message`: role and content exactly as "
                       "sent; `function_call`: call_id, name, arguments; "
                       "`function_call_output`: call_id, success, output, error (both always "
                       "present, null when absent from the submission); "
                       "`function_call_application`: call_id, state, reason; `turn`: turn_id, "
                       "state, reason.",
        "required": ["id", "session_id", "sequence", "type", "created_at"],
        "properties": {
            "id": _ID, "session_id": _ID, "sequence": {"type": "integer", "minimum": 1},
            "type": {"type": "string", "enum": ["message", "function_call",
                                                "function_call_output",
                                                "function_call_application", "turn"]},
            "created_at": {"type": "string", "format": "date-time"},
            "role": {"type": "string", "enum": ["user"]},
            "content": _CONTENT,
            "call_id": {"type": "string"},
            "name": {"type": "string"},
            "arguments": {},
            "success": {"type": "boolean"},
            "output": _nullable({"oneOf": [{"type": "string"}, _CONTENT]}),
            "error": _nullable({"type": "string"}),
            "state": {"type": "string"},
            "reason": _nullable({"type": "string"}),
            "turn_id": _nullable(_ID),
            "event_id": _ID,
            "metadata": {"type": "object", "description": "the input's metadata, exactly as "
                         "sent (on the Items the input produced: its messages or its "
                         "function_call_output)"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "external_actor": {"type": "object"},
        },
    },
    "SessionCreated": {
        "type": "object", "required": ["id", "harness", "placement", "status", "items"],
        "properties": {
            "id": _ID, "harness": {"type": "string"}, "placement": {"type": "string"},
            "status": {"type": "string"}, "metadata": {"type": "object"},
            "items": {"type": "array", "items": _ref("Item")},
        },
    },
    "EventAccepted": {
        "type": "object", "required": ["event_id", "delivery", "items"],
        "properties": {
            "event_id": _ID,
            "delivery": {"type": "string",
                         "enum": ["started", "steered", "resumed", "duplicate"]},
            "items": {"type": "array", "items": _ref("Item")},
        },
    },
    "Session": {
        "type": "object", "required": ["id", "harness", "placement", "status"],
        "properties": {
            "id": _ID, "harness": {"type": "string"}, "placement": {"type": "string"},
            "status": {"type": "string"}, "binding": _nullable({"type": "object"}),
            "runtime_id": _nullable({"type": "string"}),
            "turn": {"type": "object"}, "last_sequence": {"type": "integer"},
            "created_at": {"type": "string"}, "metadata": _nullable({"type": "object"}),
        },
    },
    "ItemPage": {
        "type": "object", "required": ["items", "has_more", "next_after"],
        "properties": {
            "items": {"type": "array", "items": _ref("Item")},
            "has_more": {"type": "boolean"}, "next_after": {"type": "integer"},
        },
    },
    "ToolResult": {
        "type": "object", "required": ["session_id", "call_id", "submitted", "submission",
                                       "state"],
        "properties": {
            "session_id": _ID, "call_id": {"type": "string"},
            "name": _nullable({"type": "string"}), "arguments": {},
            "submitted": {"type": "boolean"},
            "submission": _nullable({"type": "object", "description":
                                     "the result exactly as submitted: call_id, success, and "
                                     "only the output / error fields that were sent"}),
            "fields_present": _nullable({"type": "array", "items": {"type": "string"}}),
            "submitted_at": _nullable({"type": "string"}),
            "application": _nullable({"type": "object"}),
            "state": {"type": "string",
                      "enum": ["open", "pending", "applied", "uncertain", "failed"]},
        },
    },
    "Health": {"type": "object", "properties": {"status": {"type": "string"}}},
}


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
        "summary": "Create a Session with its first input",
        "parameters": _WAIT,
        "requestBody": _body(_ref("CreateSessionBody")),
        "responses": {"201": {**_json(_ref("SessionCreated"), "the Session and its Items"),
                              "content": {"application/json": {"schema":
                                                               _ref("SessionCreated")},
                                          "text/event-stream": {"schema": {"type": "string"}}}},
                      "200": _json(_ref("SessionCreated"), "wait=true: the first Turn ended"),
                      "202": _json(_ref("SessionCreated"),
                                   "wait=true: the budget ran out (Items so far)"),
                      **_errors(400, 401, 409, 413, 429, 503, 504)},
    },
    ("/v1/sessions/{session_id}/events", "post"): {
        "summary": "Add one event (a message or a function result)",
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
        "summary": "The Session: harness, placement, binding, status",
        "parameters": [_SESSION_ID],
        "responses": {"200": _json(_ref("Session"), "the Session"),
                      **_errors(400, 401, 404, 429, 503)},
    },
    ("/v1/sessions/{session_id}/items", "get"): {
        "summary": "Public Items in sequence order; with stream=true, follow them as SSE",
        "description": (
            "Without `stream`: a page of stored Items (recovery read). With `stream=true`: the "
            "stored Items after `after`, then each Item as it is published, as Server-Sent "
            "Events (`event: item`, `id: <sequence>`, `data: <Item>`), in sequence order with "
            "no gap and no repeat; a reconnecting client sends `Last-Event-ID` (the last "
            "sequence it saw), which takes precedence over `after`."),
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
                                          "text/event-stream": {"schema": {"type": "string"}}}},
                      **_errors(400, 401, 404, 429, 503)},
    },
    ("/v1/sessions/{session_id}/tool_results/{call_id}", "get"): {
        "summary": "A function call, its stored submission and its application state",
        "parameters": [_SESSION_ID, {"name": "call_id", "in": "path", "required": True,
                                     "schema": {"type": "string"}}],
        "responses": {"200": _json(_ref("ToolResult"), "the call"),
                      **_errors(400, 401, 404, 429, 503)},
    },
    ("/healthz", "get"): {"summary": "Liveness", "security": [],
                          "responses": {"200": _json(_ref("Health"), "alive")}},
    ("/readyz", "get"): {"summary": "Readiness: Kafka and the store reachable", "security": [],
                         "responses": {"200": _json(_ref("Health"), "ready"),
                                       "503": _json(_ref("Health"), "not ready")}},
    ("/metrics", "get"): {"summary": "Prometheus metrics", "security": [],
                          "responses": {"200": {"description": "metrics",
                                                "content": {"text/plain": {"schema":
                                                                           {"type": "string"}}}}}},
}


def request_schemas() -> dict[str, Json]:
    _, top = models_json_schema(
        [(m, "validation") for m in (CreateSessionBody, MessageEventBody, ToolResultEventBody)],
        ref_template=REF,
    )
    defs: dict[str, Json] = top["$defs"]
    return defs


def build_document(app: FastAPI) -> Json:
    doc = get_openapi(title=app.title, version=app.version, description=app.description,
                      routes=app.routes)
    for (path, method), op in OPERATIONS.items():
        target = doc["paths"][path][method]
        target.pop("parameters", None)
        target.update(op)
    doc["components"] = {
        "schemas": {**request_schemas(), **RESPONSE_SCHEMAS},
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
    }
    doc["security"] = [{"bearer": []}]
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

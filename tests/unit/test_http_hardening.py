"""The low items of issue 62, part 4, on the admission app and the health server: a lone
surrogate in a JSON key is a 400 (it was a 500: the param could not be rendered); ``/metrics``
on the API port names no tenant; a client's ``X-Request-Id`` is kept only when well-formed; a
body not received in time is a 400 that frees the tenant's in-flight slot; a client gone
mid-upload is one info log line, no error; the health server binds loopback unless told
otherwise."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from deploy.local.stack import free_port
from services.admission.http import INFLIGHT, build_http_app
from shared.health import serve_health
from shared.ids import request_id
from shared.settings import Settings

NEW_ID = re.compile(r"^req_[0-9a-f]{32}$")


async def _ready() -> bool:
    return True


def _unused() -> None:
    raise AssertionError("no use case may run for these requests")


def _app(**settings: Any) -> Any:
    return build_http_app(Settings(auth_disabled=True, **settings), _unused,  # type: ignore[arg-type]
                          _ready)


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://core")


async def test_a_lone_surrogate_in_a_key_is_a_400_naming_it_escaped() -> None:
    async with _client(_app()) as c:
        r = await c.post("/v1/sessions", content=b'{"harness": "codex", "placement": "none", '
                         b'"input": "hi", "metadata": {"\\udfff": 1}}',
                         headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"] == {"type": "invalid_request",
                                 "message": "text must be valid Unicode (unpaired surrogate)",
                                 "param": "metadata.\\udfff"}


async def test_the_api_ports_metrics_name_no_tenant() -> None:
    """CONTRACT §1 serves ``GET /metrics`` on the API; there it lists no tenant (the in-flight
    gauge is per tenant), while the metrics port's exposition keeps every sample."""
    INFLIGHT.labels("tenant-secret-name").set(3)
    try:
        async with _client(_app()) as c:
            r = await c.get("/metrics")
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
            assert "session_core_http_inflight_requests" in r.text  # the family, no sample
            assert "tenant-secret-name" not in r.text and 'tenant="' not in r.text
            assert "/metrics" in (await c.get("/openapi.json")).json()["paths"]
        assert b'tenant="tenant-secret-name"' in generate_latest()  # what the metrics port serves
    finally:
        INFLIGHT.remove("tenant-secret-name")


@pytest.mark.parametrize(("sent", "kept"), [
    ("3f2c1e4a-9b7d-4c1e-8f00-1234567890ab", True),
    ("req_" + "a" * 32, True),
    ("trace:01.abc_DEF-9", True),
    ("x" * 128, True),
    ("x" * 129, False),
    ("x" * 12_000, False),  # the probe
    ("with space", False),
    ("<script>", False),
    ("a\u00e9", False),
    ("", False),
])
async def test_a_client_request_id_is_kept_only_when_well_formed(sent: str, kept: bool) -> None:
    assert (request_id(sent) == sent) is kept
    async with _client(_app()) as c:
        r = await c.get("/healthz", headers={"x-request-id": sent.encode("utf-8")})
    echoed = r.headers["x-request-id"]
    if kept:
        assert echoed == sent
    else:
        assert NEW_ID.match(echoed), echoed


async def _call(app: Any, receive: Any) -> tuple[list[dict[str, Any]], Any]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/sessions", "raw_path":
             b"/v1/sessions", "query_string": b"", "root_path": "",
             "headers": [(b"host", b"core"), (b"content-type", b"application/json"),
                         (b"content-length", b"1000")],
             "client": ("127.0.0.1", 1), "server": ("core", 80)}
    await app(scope, receive, send)
    return sent, app


async def test_a_body_not_received_in_time_is_a_400_and_frees_the_slot() -> None:
    app = _app(body_read_timeout_s=0.3)
    first = True

    async def receive() -> dict[str, Any]:
        nonlocal first
        if first:
            first = False
            return {"type": "http.request", "body": b'{"harness": ', "more_body": True}
        await asyncio.sleep(3600)  # the rest never comes
        raise AssertionError

    with capture_logs() as logs:
        sent, _ = await asyncio.wait_for(_call(app, receive), 10)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = json.loads(b"".join(m.get("body", b"") for m in sent
                               if m["type"] == "http.response.body"))
    assert start["status"] == 400
    assert body["error"]["type"] == "invalid_request"
    assert "not received within 0.3 s" in body["error"]["message"]
    assert app.state.inflight == {}  # the tenant's slot is free again
    assert [e["event"] for e in logs if e["log_level"] in ("error", "critical")] == []


async def test_a_client_gone_mid_upload_is_one_info_line_and_frees_the_slot() -> None:
    app = _app()
    messages = iter([{"type": "http.request", "body": b'{"harness": ', "more_body": True},
                     {"type": "http.disconnect"}])

    async def receive() -> dict[str, Any]:
        return next(messages)

    with capture_logs() as logs:
        await asyncio.wait_for(_call(app, receive), 10)
    gone = [e for e in logs if e["event"] == "http.client_disconnected"]
    assert len(gone) == 1 and gone[0]["log_level"] == "info"
    assert [e for e in logs if e["log_level"] in ("error", "critical", "warning")] == []
    assert app.state.inflight == {}


def _bound_host(server: Any) -> str:
    (listener,) = server.server.servers
    host: str = listener.sockets[0].getsockname()[0]
    return host


@pytest.mark.parametrize("host", [None, "0.0.0.0"])
async def test_the_health_server_binds_loopback_unless_told(host: str | None) -> None:
    assert Settings().health_host == "127.0.0.1"
    port = free_port()
    server = (await serve_health(port, _ready) if host is None
              else await serve_health(port, _ready, host))
    assert server is not None
    try:
        assert _bound_host(server) == (host or "127.0.0.1")
        async with httpx.AsyncClient() as c:
            assert (await c.get(f"http://127.0.0.1:{port}/metrics")).status_code == 200
    finally:
        await server.stop()

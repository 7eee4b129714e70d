"""The health endpoint of the services without an HTTP API, over real HTTP: ``/healthz``,
``/readyz`` (200 or 503 with the readiness check), ``/metrics`` (Prometheus text) and 404 for
anything else; a port <= 0 serves nothing."""

from __future__ import annotations

import httpx
from prometheus_client import CONTENT_TYPE_LATEST

from deploy.local.stack import free_port
from shared.health import serve_health


async def test_health_paths_answer_with_their_status_body_and_type() -> None:
    is_ready = False

    async def ready() -> bool:
        return is_ready

    port = free_port()
    server = await serve_health(port, ready)
    assert server is not None
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            got = await client.get("/healthz")
            assert (got.status_code, got.json()) == (200, {"status": "ok"})
            assert got.headers["content-type"] == "application/json"
            got = await client.get("/readyz")
            assert (got.status_code, got.json()) == (503, {"status": "not ready"})
            is_ready = True
            got = await client.get("/readyz")
            assert (got.status_code, got.json()) == (200, {"status": "ready"})
            got = await client.get("/metrics")
            assert got.status_code == 200
            assert got.headers["content-type"] == CONTENT_TYPE_LATEST
            assert b"# TYPE " in got.content
            got = await client.get("/elsewhere")
            assert (got.status_code, got.json()) == (404, {"status": "not found"})
    finally:
        await server.stop()
    async with httpx.AsyncClient() as client:  # stopped: nothing listens any more
        try:
            await client.get(f"http://127.0.0.1:{port}/healthz")
            raise AssertionError("the stopped health server still answers")
        except httpx.ConnectError:
            pass


async def test_no_port_no_server() -> None:
    async def ready() -> bool:
        return True

    assert await serve_health(0, ready) is None

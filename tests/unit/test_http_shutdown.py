"""Admission's HTTP server stops even while a request is stuck (services/admission/serving.py,
``SHUTDOWN_GRACE_S``): uvicorn gives requests in flight the grace, then cancels them; before the
bound, one request stuck on the store held the process past its SIGTERM until it was killed."""

from __future__ import annotations

import asyncio
import socket
from unittest.mock import patch

import httpx
from fastapi import FastAPI

from services.admission import serving


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_stuck_request_does_not_hold_the_stop() -> None:
    app = FastAPI()
    app.state.closing = asyncio.Event()
    entered = asyncio.Event()

    @app.get("/stuck")
    async def stuck() -> dict[str, str]:
        entered.set()
        await asyncio.Event().wait()  # never answers by itself
        return {}

    port = free_port()
    with patch.object(serving, "SHUTDOWN_GRACE_S", 0.5):
        server = serving.HttpServer(app, "127.0.0.1", port)
    await server.start()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
        request = asyncio.create_task(client.get("/stuck", timeout=30))
        await asyncio.wait_for(entered.wait(), 10)
        # unbounded, this stop waited for ever (the test's wait_for would raise TimeoutError)
        await asyncio.wait_for(server.stop(), 10)
        assert app.state.closing.is_set()
        done, _ = await asyncio.wait({request}, timeout=10)
        assert request in done
        assert request.exception() is not None or request.result().status_code >= 500


async def test_an_idle_pooled_connection_outlives_the_clients_own_expiry() -> None:
    """``KEEP_ALIVE_S``: the server keeps an idle connection open longer than a client pools it,
    so a request on a pooled connection never meets a socket the server just closed. With
    uvicorn's default (5 s, httpx's own expiry) the second request below got an empty read."""
    assert serving.KEEP_ALIVE_S > httpx.Limits().keepalive_expiry + 5  # type: ignore[operator]
    app = FastAPI()
    app.state.closing = asyncio.Event()

    @app.get("/ping")
    async def ping() -> dict[str, str]:
        return {"ok": "yes"}

    port = free_port()
    server = serving.HttpServer(app, "127.0.0.1", port)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = b"GET /ping HTTP/1.1\r\nhost: core\r\n\r\n"
        for wait_s in (0.0, 5.5):  # past uvicorn's default idle timeout of 5 s
            await asyncio.sleep(wait_s)
            writer.write(request)
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200"), head
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            assert await reader.readexactly(length) == b'{"ok":"yes"}'
        writer.close()
    finally:
        await server.stop()

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

"""A minimal health endpoint for the services that have no HTTP API: ``/healthz`` (process up),
``/readyz`` (the given readiness check passes: broker and store reachable) and ``/metrics``
(Prometheus text: the process's counters, e.g. ``session_core_dlq_records_total``). FastStream's
ASGI app served by uvicorn in the service's event loop; its lifespan is off, since each service
starts and stops its brokers itself."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import uvicorn
from faststream.asgi import AsgiFastStream, AsgiResponse, get
from faststream.asgi.types import Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

Check = Callable[[], Awaitable[bool]]


def _json(status: int, body: bytes) -> AsgiResponse:
    return AsgiResponse(body, status, {"Content-Type": "application/json"})


class _App(AsgiFastStream):
    async def not_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        await _json(404, b'{"status":"not found"}')(scope, receive, send)


class _Server(uvicorn.Server):
    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        # SIGTERM belongs to the service (shared.service.run_until_stopped), whose stop ends this
        yield


class HealthServer:
    def __init__(self, server: uvicorn.Server, task: asyncio.Task[None]) -> None:
        self.server, self.task = server, task

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


async def serve_health(port: int, ready: Check, host: str = "127.0.0.1"
                       ) -> HealthServer | None:
    """Serve the three routes on ``host:port`` (``health_host``: loopback unless the deployment
    says otherwise — the chart binds the pod's addresses for the kubelet's probes and the
    scrape); nothing when ``port`` ≤ 0."""
    if port <= 0:
        return None

    @get
    async def healthz(scope: Scope) -> AsgiResponse:
        return _json(200, b'{"status":"ok"}')

    @get
    async def readyz(scope: Scope) -> AsgiResponse:
        if await ready():
            return _json(200, b'{"status":"ready"}')
        return _json(503, b'{"status":"not ready"}')

    @get
    async def metrics(scope: Scope) -> AsgiResponse:
        return AsgiResponse(generate_latest(), 200, {"Content-Type": CONTENT_TYPE_LATEST})

    app = _App(asgi_routes=[("/healthz", healthz), ("/readyz", readyz), ("/metrics", metrics)])
    server = _Server(uvicorn.Config(app, host=host, port=port, log_config=None,
                                    access_log=False, lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            await task  # uvicorn logs why it could not bind and exits
            raise RuntimeError("the health server did not start")
        await asyncio.sleep(0.02)
    return HealthServer(server, task)

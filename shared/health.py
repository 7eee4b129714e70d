"""A minimal health endpoint for the services that have no HTTP API: ``/healthz`` (process up),
``/readyz`` (the given readiness check passes: broker and store reachable) and ``/metrics``
(Prometheus text: the process's counters, e.g. ``session_core_dlq_records_total``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

Check = Callable[[], Awaitable[bool]]


async def serve_health(port: int, ready: Check) -> asyncio.AbstractServer | None:
    if port <= 0:
        return None

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            path = line.decode("latin-1").split(" ")[1] if line.count(b" ") >= 2 else "/"
            ctype = "application/json"
            if path == "/healthz":
                status, body = 200, b'{"status":"ok"}'
            elif path == "/metrics":
                status, body, ctype = 200, generate_latest(), CONTENT_TYPE_LATEST
            elif path == "/readyz":
                ok = await ready()
                status = 200 if ok else 503
                body = b'{"status":"ready"}' if ok else b'{"status":"not ready"}'
            else:
                status, body = 404, b'{"status":"not found"}'
            reason = {200: "OK", 503: "Service Unavailable", 404: "Not Found"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except Exception:
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "0.0.0.0", port)

"""The HTTP API served by uvicorn inside the service's event loop, with a shutdown that tells
waiting requests first: on SIGTERM (uvicorn handles it itself and then waits for requests in
flight) or ``stop()``, every wait answers 202 with its Items so far instead of holding the exit."""

from __future__ import annotations

import asyncio
from types import FrameType

import uvicorn
from fastapi import FastAPI

from shared.logging import get_logger

log = get_logger(__name__)


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, closing: asyncio.Event) -> None:
        super().__init__(config)
        self.closing = closing
        self.loop = asyncio.get_running_loop()
        self.closing_at: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # a signal handler: the rest runs on the loop
        self.loop.call_soon_threadsafe(self.close)
        super().handle_exit(sig, frame)

    def close(self) -> None:
        """Waiting requests answer now; logs what the drain will wait for."""
        if self.closing_at is None:
            self.closing_at = self.loop.time()
            log.info("http.closing", connections=len(self.server_state.connections),
                     requests=len(self.server_state.tasks))
        self.closing.set()

    async def serve_logged(self) -> None:
        await self.serve()
        drained = None if self.closing_at is None else self.loop.time() - self.closing_at
        log.info("http.closed", drain_s=None if drained is None else round(drained, 3),
                 connections_left=len(self.server_state.connections))


# After SIGTERM, requests still in flight get this long to finish before uvicorn cancels them
# (waits answer at once: ``closing``). Unbounded, one request stuck on the store held the exit
# until the pod's grace period ran out and it was killed (seen in the chaos suite's store-outage
# teardown: admission "did not stop within 15 s of SIGTERM"). The chart gives a pod 30 s, 5 of
# them before SIGTERM (preStop), so this leaves the rest of the stop ~15 s.
SHUTDOWN_GRACE_S = 10

# An idle keep-alive connection stays open this long. It must outlast the idle timeout of every
# client and proxy that pools connections to admission, so the client side always closes first:
# when both ends used 5 s (uvicorn's and httpx's defaults), a request sent on a pooled connection
# just as the server closed it failed with ReadError / RemoteProtocolError, with no fault anywhere
# (seen once in the chaos suite's rebalance row, admission untouched). 120 s outlasts httpx's 5 s,
# a cloud load balancer's usual 60 s and Go's http.Transport's 90 s.
KEEP_ALIVE_S = 120


class HttpServer:
    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self.app = app
        self.config = uvicorn.Config(app, host=host, port=port, log_config=None,
                                     access_log=False, lifespan="off",
                                     timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
                                     timeout_keep_alive=KEEP_ALIVE_S)
        self.server: _Server | None = None
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.server = _Server(self.config, self.app.state.closing)
        self.task = asyncio.create_task(self.server.serve_logged())
        while not self.server.started:
            if self.task.done():
                await self.task
                raise RuntimeError("HTTP server did not start")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self.server is None or self.task is None:
            return
        self.server.close()  # waiting requests answer 202 now
        self.server.should_exit = True
        await self.task

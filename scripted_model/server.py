"""The scripted model server's HTTP app.

* ``POST /v1/responses`` — OpenAI Responses API (SSE), what Codex calls (``responses_api``);
* ``POST /v1/messages`` — Anthropic Messages API (SSE, or plain JSON when ``stream`` is false),
  what Claude Code calls (``messages_api``);
* ``POST /_scripts`` ``{"key", "replies": [[step…]…]}`` — register a script;
* ``GET /_requests?key=K`` — the recorded requests (all, or those a script answered).

``python -m scripted_model --port N`` runs it; tests embed it with ``ModelServer``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from scripted_model import messages_api, responses_api
from scripted_model.script import ScriptError, Scripts


def build_app(scripts: Scripts) -> Starlette:
    async def responses(request: Request) -> Response:
        raw = (await request.body()).decode()
        return await responses_api.handle(scripts, request.url.path, raw, json.loads(raw))

    async def messages(request: Request) -> Response:
        raw = (await request.body()).decode()
        return await messages_api.handle(scripts, request.url.path, raw, json.loads(raw))

    async def register(request: Request) -> Response:
        body: Any = await request.json()
        try:
            scripts.register(body.get("key", ""), body.get("replies", []))
        except (ScriptError, AttributeError) as e:
            return JSONResponse({"error": str(e)}, status_code=400)
        return JSONResponse({"ok": True})

    async def requests_(request: Request) -> Response:
        key = request.query_params.get("key")
        return JSONResponse([r.as_json() for r in scripts.recorded(key)])

    return Starlette(routes=[
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/_scripts", register, methods=["POST"]),
        Route("/_requests", requests_, methods=["GET"]),
    ])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ModelServer:
    """The server in a background thread of this process (tests, the bench)."""

    def __init__(self, port: int = 0) -> None:
        self.scripts = Scripts()
        self.port = port or _free_port()
        self._server = uvicorn.Server(uvicorn.Config(
            build_app(self.scripts), host="127.0.0.1", port=self.port, log_level="warning",
            lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, daemon=True,
                                        name="modelserver")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ModelServer:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the model server did not start")
            threading.Event().wait(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@contextlib.contextmanager
def running(port: int = 0) -> Iterator[ModelServer]:
    server = ModelServer(port).start()
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripted_model",
                                     description="the scripted local model server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--log", default=None, metavar="FILE",
                        help="also append every recorded request to FILE (JSON lines)")
    args = parser.parse_args(argv)
    config = uvicorn.Config(build_app(Scripts(args.log)), host=args.host, port=args.port,
                            log_level="warning", lifespan="off")
    asyncio.run(uvicorn.Server(config).serve())
    return 0

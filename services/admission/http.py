"""The HTTP API of CONTRACT §1: thin handlers that parse, call ``Admission``, answer."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.admission import openapi
from services.admission.core import Admission, Answer, body_too_large
from shared.domain import errors
from shared.domain.jsonbody import parse_json
from shared.ids import new_id
from shared.logging import bound, get_logger
from shared.settings import Settings
from shared.store import STORE_UNREACHABLE

log = get_logger(__name__)

# Exceptions that mean a dependency is unreachable (not a bug): answered 503 ``unavailable``.
UNAVAILABLE: tuple[type[Exception], ...] = (*STORE_UNREACHABLE, KafkaConnectionError,
                                            KafkaTimeoutError)
RETRY_AFTER_S = "1"

REQUESTS = Counter("session_core_http_requests_total", "HTTP requests", ["route", "status"])
LATENCY = Histogram("session_core_http_request_seconds", "HTTP latency", ["route"])


def _json(answer: Answer) -> JSONResponse:
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


def _err(err: errors.ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def build_http_app(
    settings: Settings,
    get_admission: Callable[[], Admission],
    ready: Callable[[], Awaitable[bool]],
) -> FastAPI:
    app = FastAPI(
        title="Session Core",
        version="1.0.0",
        description="Admits, stores, routes and confirms the input of AI-agent sessions.",
    )
    keys = {k.strip() for k in settings.api_keys.split(",") if k.strip()}
    waits = asyncio.Semaphore(settings.max_concurrent_waits)

    @app.middleware("http")
    async def envelope(request: Request, call_next: Callable[[Request], Awaitable[Response]]
                       ) -> Response:
        rid = request.headers.get("x-request-id") or new_id("req")
        route = request.scope.get("route")
        started = time.perf_counter()
        with bound(request_id=rid):
            if request.url.path.startswith("/v1/") and not settings.auth_disabled:
                auth = request.headers.get("authorization", "")
                if not auth.startswith("Bearer ") or auth[7:] not in keys:
                    resp: Response = JSONResponse(
                        {"error": {"type": "unauthorized", "message":
                                   "missing or wrong bearer API key", "param": None}},
                        status_code=401,
                    )
                    REQUESTS.labels("auth", "401").inc()
                    return resp
            resp = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "other")
        REQUESTS.labels(path, str(resp.status_code)).inc()
        LATENCY.labels(path).observe(time.perf_counter() - started)
        resp.headers["x-request-id"] = rid
        return resp

    async def read_body(request: Request) -> Any | errors.ApiError:
        limit = settings.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            return body_too_large(limit)
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return body_too_large(limit)
            chunks.append(chunk)
        return parse_json(b"".join(chunks))

    @app.post("/v1/sessions", status_code=201)
    async def create_session(request: Request) -> Response:
        body = await read_body(request)
        if isinstance(body, errors.ApiError):
            return _err(body)
        adm = get_admission()
        if isinstance(body, dict) and body.get("stream") is True:
            return await _stream_create(adm, body)
        return _json(await adm.create_session(body))

    async def _stream_create(adm: Admission, body: dict[str, Any]) -> Response:
        # Validate and store first: an admission error is a plain JSON answer, never a stream.
        # Items published before the listener attaches come back from the store.
        answer = await adm.create_session(body)
        if answer.status >= 300 or answer.session_id is None:
            return _json(answer)
        sid = answer.session_id
        q = adm.items.listen(sid)

        async def events() -> AsyncIterator[bytes]:
            seen: set[int] = set()
            try:
                yield _sse("session", {k: v for k, v in answer.body.items() if k != "items"})
                for it in answer.body.get("items", []):
                    seen.add(it["sequence"])
                    yield _sse("item", it)
                while True:
                    try:
                        it = await asyncio.wait_for(q.get(), 15)
                    except TimeoutError:
                        yield b": keep-alive\n\n"
                        continue
                    it = {k: v for k, v in it.items() if k != "schema"}
                    if it.get("sequence") in seen:
                        continue
                    seen.add(it["sequence"])
                    yield _sse("item", it)
            finally:
                adm.items.unlisten(sid, q)

        return StreamingResponse(events(), status_code=201, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})

    @app.post("/v1/sessions/{session_id}/events", status_code=202)
    async def add_event(session_id: str, request: Request) -> Response:
        wait = request.query_params.get("wait", "false").lower() in ("1", "true", "yes")
        timeout_raw = request.query_params.get("timeout_ms", "120000")
        if not timeout_raw.isdigit():
            return _err(errors.invalid("timeout_ms must be a non-negative integer", "timeout_ms"))
        timeout_ms = min(int(timeout_raw), 600_000)
        body = await read_body(request)
        if isinstance(body, errors.ApiError):
            return _err(body)
        adm = get_admission()
        if not wait:
            return _json(await adm.add_event(session_id, body))
        if waits.locked():
            return _err(errors.ApiError("rate_limited", "too many concurrent waits", None),
                        {"Retry-After": "1"})
        async with waits:
            q = adm.items.listen(session_id)
            try:
                answer = await adm.add_event(session_id, body)
                if answer.status >= 300 or answer.turn_id is None:
                    return _json(answer)
                return await _wait_turn(answer, q, timeout_ms / 1000)
            finally:
                adm.items.unlisten(session_id, q)

    async def _wait_turn(answer: Answer, q: asyncio.Queue[dict[str, Any]], budget: float
                         ) -> Response:
        turn_id = answer.turn_id
        items = list(answer.body.get("items", []))
        seen = {it["sequence"] for it in items}
        # A function result's Turn is done for the caller when the Turn ends AND the result's
        # application is decided (its Item may follow the Turn's end).
        calls = {it["call_id"] for it in items if it.get("type") == "function_call_output"}
        turn_over = False
        deadline = asyncio.get_running_loop().time() + budget
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return JSONResponse({**answer.body, "items": items}, status_code=202)
            try:
                it = await asyncio.wait_for(q.get(), left)
            except TimeoutError:
                continue
            it = {k: v for k, v in it.items() if k != "schema"}
            is_application = (it.get("type") == "function_call_application"
                              and it.get("call_id") in calls)
            if (it.get("turn_id") != turn_id and not is_application) or (
                    it.get("sequence") in seen):
                continue
            seen.add(it["sequence"])
            items.append(it)
            if is_application:
                calls.discard(it["call_id"])
            if it.get("type") == "turn" and it.get("state") in ("completed", "failed"):
                turn_over = True
            if turn_over and not calls:
                return JSONResponse({**answer.body, "items": items}, status_code=200)

    @app.get("/v1/sessions/{session_id}")
    async def get_session(session_id: str) -> Response:
        return _json(await get_admission().get_session(session_id))

    @app.get("/v1/sessions/{session_id}/items")
    async def list_items(session_id: str, request: Request) -> Response:
        after_raw = request.query_params.get("after", "0")
        limit_raw = request.query_params.get("limit", "100")
        if not after_raw.isdigit():
            return _err(errors.invalid("after must be a non-negative integer", "after"))
        if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= 1000:
            return _err(errors.invalid("limit must be an integer from 1 to 1000", "limit"))
        return _json(await get_admission().list_items(session_id, int(after_raw),
                                                      int(limit_raw)))

    @app.get("/v1/sessions/{session_id}/tool_results/{call_id}")
    async def get_tool_result(session_id: str, call_id: str) -> Response:
        return _json(await get_admission().get_tool_result(session_id, call_id))

    @app.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @app.get("/readyz")
    async def readyz() -> Response:
        ok = await ready()
        return JSONResponse({"status": "ready" if ok else "not ready"},
                            status_code=200 if ok else 503)

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        """Unknown paths and methods answer in the contract's error shape too."""
        etype: errors.ErrorType = "not_found" if exc.status_code == 404 else "invalid_request"
        message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
        return JSONResponse({"error": {"type": etype, "message": message, "param": None}},
                            status_code=exc.status_code, headers=exc.headers)

    async def dependency_away(request: Request, exc: Exception) -> Response:
        """The one place where "the store (or broker) is unreachable" becomes an answer: 503
        ``unavailable`` with ``Retry-After``. Raised before anything was written, or while
        handing over — then the input may be on Kafka and a retry with the same idempotency id
        returns the stored result."""
        log.warning("http.unavailable", path=request.url.path, error=repr(exc))
        return _err(errors.unavailable(
            "a dependency (the store or the broker) is unreachable; nothing is lost by "
            "retrying with the same idempotency id"), {"Retry-After": RETRY_AFTER_S})

    for exc_type in UNAVAILABLE:
        app.add_exception_handler(exc_type, dependency_away)

    @app.exception_handler(Exception)
    async def crash(request: Request, exc: Exception) -> Response:
        log.exception("http.unhandled", path=request.url.path)
        return _err(errors.ApiError("internal_error", "internal error", None))

    openapi.install(app)
    return app


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

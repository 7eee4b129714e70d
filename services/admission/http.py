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
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.admission import openapi
from services.admission.core import Admission, Answer, body_too_large
from services.admission.parsing import BodyParser
from shared import tracing
from shared.domain import errors, waiting
from shared.domain.tenancy import DEFAULT_TENANT, ApiKeys, bearer
from shared.ids import request_id
from shared.logging import bound, get_logger
from shared.metrics import HTTP_BUCKETS
from shared.settings import Settings
from shared.store import STORE_UNREACHABLE

log = get_logger(__name__)
access_log = get_logger("session_core.access")

# Exceptions that mean a dependency is unreachable (not a bug): answered 503 ``unavailable``.
UNAVAILABLE: tuple[type[Exception], ...] = (*STORE_UNREACHABLE, KafkaConnectionError,
                                            KafkaTimeoutError)
RETRY_AFTER_S = "1"

REQUESTS = Counter("session_core_http_requests_total", "HTTP requests", ["route", "status"])
# buckets up to the 600 s a ?wait may last (shared.metrics.HTTP_BUCKETS)
LATENCY = Histogram("session_core_http_request_duration_seconds",
                    "HTTP request duration, waits included", ["route"], buckets=HTTP_BUCKETS)
INFLIGHT = Gauge("session_core_http_inflight_requests", "HTTP requests being handled",
                 ["tenant"])
WAITS_ACTIVE = Gauge("session_core_waits_active",
                     "?wait=true requests admitted and waiting for their Turn now")
WAITS_REFUSED = Counter("session_core_waits_refused_total", "?wait=true requests refused (429)")
WAIT_RETRY_AFTER_S = 1


def _json(answer: Answer) -> JSONResponse:
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


def _tenant(request: Request) -> str:
    """The tenant the middleware authenticated (``default`` with auth disabled)."""
    tenant: str = request.state.tenant
    return tenant


def without_tenants(exposition: bytes) -> bytes:
    """A Prometheus text exposition less its samples with a ``tenant`` label (the families'
    HELP and TYPE lines stay: a family with no sample is valid)."""
    return b"\n".join(line for line in exposition.split(b"\n") if b'tenant="' not in line)


def _access(request: Request, status: int, started: float, tenant: str | None) -> None:
    """The JSON access log: one line per request (uvicorn's own access log is off). A streamed
    (SSE) answer is logged when its headers are sent."""
    if request.url.path in ("/healthz", "/readyz", "/metrics"):
        return  # probes and scrapes: every few seconds, nothing to read
    access_log.info("http.access", method=request.method, path=request.url.path,
                    status=status, duration_ms=round((time.perf_counter() - started) * 1000, 1),
                    tenant=tenant, client=request.client.host if request.client else None)


def _answered(span: Span, method: str, route: str, status: int) -> None:
    """The request's span named by its route (``POST /v1/sessions``) once it is answered."""
    span.update_name(f"{method} {route}")
    span.set_attribute("http.route", route)
    span.set_attribute("http.response.status_code", status)
    if status >= 500:
        span.set_status(Status(StatusCode.ERROR))


def _err(err: errors.ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


class Envelope:
    """Every request: its request id (``x-request-id``, bound to its logs), the tenant's API
    key (401), the tenant's in-flight cap (429), metrics and one access-log line. A plain ASGI
    middleware: Starlette's ``BaseHTTPMiddleware`` ran each request in a task group with
    memory streams, a measurable share of a small request's cost. A request counts as in
    flight until its answer starts (a stream's headers; a wait's answer), as before."""

    def __init__(self, app: ASGIApp, settings: Settings,
                 tenant_of: Callable[[Request], str | None], inflight: dict[str, int],
                 tracer: Tracer | None = None) -> None:
        self.app = app
        self.settings = settings
        self.tenant_of = tenant_of
        self.inflight = inflight
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.tracer is None or not scope["path"].startswith("/v1/"):
            await self._serve(scope, receive, send, None)
            return
        # a SERVER span per API request, child of the caller's traceparent (if any), current
        # while the request is handled: its hand-over to storage is its child
        method = scope["method"]
        parent = tracing.http_context(Request(scope).headers)
        with self.tracer.start_as_current_span(
                method, context=parent, kind=SpanKind.SERVER,
                attributes={"http.request.method": method, "url.path": scope["path"]}) as span:

            async def answered(message: Message) -> None:
                if message["type"] == "http.response.start":
                    _answered(span, method, getattr(scope.get("route"), "path", "other"),
                              message["status"])
                await send(message)

            await self._serve(scope, receive, answered, span)

    async def _serve(self, scope: Scope, receive: Receive, send: Send,
                     span: Span | None) -> None:
        request = Request(scope)
        rid = request_id(request.headers.get("x-request-id"))
        started = time.perf_counter()
        tenant: str | None = None
        if span is not None:
            span.set_attribute("session_core.request_id", rid)
        with bound(request_id=rid):
            if scope["path"].startswith("/v1/"):  # probes and metrics: no key, no cap
                tenant = self.tenant_of(request)
                if tenant is None:
                    REQUESTS.labels("auth", "401").inc()
                    _access(request, 401, started, None)
                    await _err(errors.ApiError(
                        "unauthorized", "missing or wrong bearer API key", None,
                    ))(scope, receive, send)
                    return
                if self.inflight.get(tenant, 0) >= self.settings.max_inflight_per_tenant:
                    REQUESTS.labels("inflight", "429").inc()
                    _access(request, 429, started, tenant)
                    await _err(errors.ApiError(
                        "rate_limited", "too many requests of this tenant in flight; retry "
                        "after the time in Retry-After", None), {"Retry-After": "1"},
                    )(scope, receive, send)
                    return
                scope.setdefault("state", {})["tenant"] = tenant  # request.state.tenant
                self.inflight[tenant] = self.inflight.get(tenant, 0) + 1
                INFLIGHT.labels(tenant).inc()
            held = tenant is not None

            def release() -> None:
                nonlocal held
                if held and tenant is not None:
                    held = False
                    INFLIGHT.labels(tenant).dec()
                    self.inflight[tenant] -= 1
                    if not self.inflight[tenant]:
                        del self.inflight[tenant]

            async def answer(message: Message) -> None:
                if message["type"] == "http.response.start":
                    release()
                    message["headers"] = [*message.get("headers", ()),
                                          (b"x-request-id", rid.encode())]
                    path = getattr(scope.get("route"), "path", "other")
                    REQUESTS.labels(path, str(message["status"])).inc()
                    LATENCY.labels(path).observe(time.perf_counter() - started)
                    with bound(request_id=rid):
                        _access(request, message["status"], started, tenant)
                await send(message)

            try:
                await self.app(scope, receive, answer)
            finally:
                release()


def build_http_app(
    settings: Settings,
    get_admission: Callable[[], Admission],
    ready: Callable[[], Awaitable[bool]],
    tracer: Tracer | None = None,
) -> FastAPI:
    app = FastAPI(
        title="Session Core",
        version="1.0.0",
        description="Admits, stores, routes and confirms the input of AI-agent sessions.",
    )
    keys = ApiKeys.parse(settings.api_keys)  # a malformed entry stops the service here
    # Requests of each tenant being handled now (docs/security.md, back-pressure).
    inflight: dict[str, int] = {}
    app.state.inflight = inflight
    parser = BodyParser()  # bodies over 1 MiB parsed in a child process (parsing.py)
    app.state.parser = parser

    def tenant_of(request: Request) -> str | None:
        if settings.auth_disabled:
            return DEFAULT_TENANT
        key = bearer(request.headers.get("authorization", ""))
        return None if key is None else keys.tenant_of(key)
    slots = waiting.WaitSlots(settings.max_concurrent_waits,
                              settings.max_concurrent_waits_per_tenant)
    # Set on shutdown: every wait answers at once with its Items so far (202), so a stopping
    # replica does not hold its clients (and its own exit) for up to the 600 s budget.
    closing = asyncio.Event()
    app.state.closing = closing

    app.add_middleware(Envelope, settings=settings, tenant_of=tenant_of, inflight=inflight,
                       tracer=tracer)

    async def read_body(request: Request) -> Any | errors.ApiError:
        """The JSON body, read within ``body_read_timeout_s``: a client that sends it too slowly
        (or never) gets a 400 and frees its tenant's in-flight slot; one that goes away
        mid-upload is logged once at info (nobody reads the answer)."""
        limit = settings.max_body_bytes
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > limit:
            return body_too_large(limit)
        chunks, size = [], 0
        try:
            async with asyncio.timeout(settings.body_read_timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        return body_too_large(limit)
                    chunks.append(chunk)
        except TimeoutError:
            log.info("http.body_timeout", path=request.url.path, received=size,
                     timeout_s=settings.body_read_timeout_s)
            return errors.invalid(f"the request body was not received within "
                                  f"{settings.body_read_timeout_s:g} s", None)
        except ClientDisconnect:
            log.info("http.client_disconnected", path=request.url.path, received=size)
            return errors.invalid("the client went away before its body was received", None)
        return await parser.parse(b"".join(chunks))

    async def read_write(request: Request) -> tuple[waiting.WaitRequest, Any] | Response:
        """A write's ``wait`` query and JSON body, or the error answer for either."""
        wr = waiting.parse_wait(request.query_params)
        if isinstance(wr, errors.ApiError):
            return _err(wr)
        body = await read_body(request)
        if isinstance(body, errors.ApiError):
            return _err(body)
        return wr, body

    async def admit(request: Request, wr: waiting.WaitRequest,
                    admit: Callable[[], Awaitable[Answer]], session_id: str | None) -> Response:
        if not wr.wait:
            return _json(await admit())
        return await _waiting(request, wr, admit, session_id)

    @app.post("/v1/sessions", status_code=201)
    async def create_session(request: Request) -> Response:
        read = await read_write(request)
        if isinstance(read, Response):
            return read
        wr, body = read
        adm = get_admission()
        if isinstance(body, dict) and body.get("stream") is True:
            if wr.wait:
                return _err(errors.invalid("stream and wait cannot be combined", "wait"))
            return await _stream_create(adm, body, _tenant(request))
        return await admit(request, wr,
                           lambda: adm.create_session(body, tenant=_tenant(request)), None)

    async def _stream_create(adm: Admission, body: dict[str, Any], tenant: str) -> Response:
        # Validate and store first: an admission error is a plain JSON answer, never a stream.
        answer = await adm.create_session(body, tenant=tenant)
        if answer.status >= 300 or answer.session_id is None:
            return _json(answer)
        sid = answer.session_id
        # Attach first, then read back what storage published between its reply and now
        # (the shared Item tail drops Items no one listens for); de-duplicated by sequence.
        q = adm.items.listen(sid)

        async def events() -> AsyncIterator[bytes]:
            seen: set[int] = set()

            def fresh(it: dict[str, Any]) -> bool:
                seq = it.get("sequence")
                if not isinstance(seq, int) or seq in seen:
                    return False
                seen.add(seq)
                return True

            try:
                yield _sse("session", {k: v for k, v in answer.body.items() if k != "items"})
                known = list(answer.body.get("items", []))
                for it in known:
                    if fresh(it):
                        yield _sse("item", it)
                after = max((it["sequence"] for it in known), default=0)
                for it in await adm.items_after(sid, after):
                    if fresh(it):
                        yield _sse("item", it)
                async for it in _live(q):
                    if it is None:
                        yield KEEP_ALIVE
                    elif fresh(it):
                        yield _sse("item", it)
            finally:
                adm.items.unlisten(sid, q)

        return StreamingResponse(events(), status_code=201, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache",
                                          # ingress-nginx and other proxies: no buffering
                                          "X-Accel-Buffering": "no"})

    @app.post("/v1/sessions/{session_id}/events", status_code=202)
    async def add_event(session_id: str, request: Request) -> Response:
        read = await read_write(request)
        if isinstance(read, Response):
            return read
        wr, body = read
        adm = get_admission()
        return await admit(request, wr,
                           lambda: adm.add_event(session_id, body, tenant=_tenant(request)),
                           session_id)

    async def _waiting(request: Request, wr: waiting.WaitRequest,
                       admit: Callable[[], Awaitable[Answer]], session_id: str | None
                       ) -> Response:
        """A wait slot first (429 before anything is admitted), then admission exactly as
        without ``wait``, then the Turn's Items until it ends, the budget runs out or the
        client goes away (which frees the slot at once)."""
        tenant = _tenant(request)
        if not slots.acquire(tenant):
            WAITS_REFUSED.inc()
            return _err(errors.ApiError("rate_limited", "too many concurrent waits; retry later",
                                        None), {"Retry-After": str(WAIT_RETRY_AFTER_S)})
        try:
            answer = await admit()
            sid = session_id or answer.session_id
            if answer.status >= 300 or sid is None:
                return _json(answer)
            return await _wait_turn(request, answer, sid, wr.timeout_ms / 1000)
        finally:
            slots.release(tenant)

    async def _wait_turn(request: Request, answer: Answer, session_id: str, budget: float
                         ) -> Response:
        adm = get_admission()
        watch = waiting.TurnWatch(list(answer.body.get("items", [])))
        q = adm.items.listen(session_id)
        collect = asyncio.create_task(_collect(adm, session_id, watch, q))
        gone = asyncio.create_task(_disconnected(request))
        stop = asyncio.create_task(closing.wait())
        WAITS_ACTIVE.inc()
        try:
            await asyncio.wait({collect, gone, stop}, timeout=budget,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (collect, gone, stop):
                task.cancel()
            await asyncio.gather(collect, gone, stop, return_exceptions=True)
            adm.items.unlisten(session_id, q)
            WAITS_ACTIVE.dec()
        if collect.done() and not collect.cancelled():
            collect.result()  # a store error surfaces as the 500 it is
        if gone.done() and not gone.cancelled():
            log.info("admission.wait_client_gone", session_id=session_id)
        status = 200 if watch.done else 202
        return JSONResponse({**answer.body, "items": watch.items()}, status_code=status,
                            headers=answer.headers)

    @app.get("/v1/sessions/{session_id}")
    async def get_session(session_id: str, request: Request) -> Response:
        return _json(await get_admission().get_session(session_id, tenant=_tenant(request)))

    @app.get("/v1/sessions/{session_id}/items")
    async def list_items(session_id: str, request: Request) -> Response:
        after_raw = request.query_params.get("after", "0")
        limit_raw = request.query_params.get("limit", "100")
        stream_raw = request.query_params.get("stream", "false")
        if stream_raw not in ("true", "false"):
            return _err(errors.invalid("stream must be true or false", "stream"))
        resume = request.headers.get("last-event-id")
        if stream_raw == "true" and resume is not None:
            # Last-Event-ID is the last sequence the client saw (the SSE ``id:``): it wins
            # over ``after`` so a reconnecting EventSource resumes without a gap or repeat.
            if not resume.isdigit():
                return _err(errors.invalid("Last-Event-ID must be an Item sequence",
                                           "Last-Event-ID"))
            after_raw = resume
        if not after_raw.isdigit():
            return _err(errors.invalid("after must be a non-negative integer", "after"))
        if stream_raw == "true":
            return await _follow(session_id, int(after_raw), _tenant(request))
        if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= 1000:
            return _err(errors.invalid("limit must be an integer from 1 to 1000", "limit"))
        return _json(await get_admission().list_items(session_id, int(after_raw),
                                                      int(limit_raw), tenant=_tenant(request)))

    async def _follow(session_id: str, after: int, tenant: str) -> Response:
        """``GET …/items?stream=true&after=N``: the stored Items after N, then every Item as it
        is published, as SSE events with ``id: <sequence>``, in sequence order, none twice.
        The listener attaches before the store is read, so nothing published in between is
        missed; a gap in what the tail delivers is filled from the store."""
        adm = get_admission()
        first = await adm.list_items(session_id, after, 1, tenant=tenant)
        if first.status >= 300:
            return _json(first)
        q = adm.items.listen(session_id)

        async def events() -> AsyncIterator[bytes]:
            last = after
            try:
                async for doc in adm.stored_items(session_id, last):
                    last = doc["sequence"]
                    yield _sse("item", doc)
                async for it in _live(q):
                    if it is None:
                        yield KEEP_ALIVE
                        continue
                    seq = it.get("sequence")
                    if not isinstance(seq, int) or seq <= last:
                        continue
                    if seq > last + 1:
                        async for stored in adm.stored_items(session_id, last):
                            last = stored["sequence"]
                            yield _sse("item", stored)
                        if seq <= last:
                            continue
                    last = seq
                    yield _sse("item", it)
            finally:
                adm.items.unlisten(session_id, q)

        return StreamingResponse(events(), status_code=200, media_type="text/event-stream",
                                 headers=SSE_HEADERS)

    @app.get("/v1/sessions/{session_id}/tool_results/{call_id}")
    async def get_tool_result(session_id: str, call_id: str, request: Request) -> Response:
        return _json(await get_admission().get_tool_result(session_id, call_id,
                                                           tenant=_tenant(request)))

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
        """CONTRACT §1's metrics on the API port, less every sample that names a tenant: anyone
        who reaches the API could otherwise list the tenants and their in-flight load. The
        metrics port serves them all (docs/security.md)."""
        return Response(without_tenants(generate_latest()), media_type=CONTENT_TYPE_LATEST)

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


async def _collect(adm: Admission, session_id: str, watch: waiting.TurnWatch,
                   q: asyncio.Queue[dict[str, Any]]) -> None:
    """Until the watch is done: the Items already stored (published before the listener
    attached), then the shared Item tail's."""
    await adm.catch_up(session_id, watch)
    while not watch.done:
        watch.offer(await q.get())


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone away: after the body is read, the next ASGI message is
    ``http.disconnect`` (the server sends it when the connection closes)."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


KEEP_ALIVE = b": keep-alive\n\n"  # an SSE comment: proxies keep a silent stream open


async def _live(q: asyncio.Queue[dict[str, Any]]) -> AsyncIterator[dict[str, Any] | None]:
    """Items as the Item tail hands them over; ``None`` after 15 s without one."""
    while True:
        try:
            yield await asyncio.wait_for(q.get(), 15)
        except TimeoutError:
            yield None


def _sse(event: str, data: Any) -> bytes:
    """One SSE event; an Item's event carries ``id: <sequence>`` so a client resumes with
    ``Last-Event-ID``."""
    seq = data.get("sequence") if event == "item" and isinstance(data, dict) else None
    head = f"id: {seq}\n" if isinstance(seq, int) else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

"""The HTTP API of CONTRACT §1: the app that serves ``routes.router`` — every request through
the ``Envelope`` (request id, API key, in-flight cap, span, metrics, access log), and the
exceptions that become the contract's error answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from prometheus_client import Counter, Gauge, Histogram
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.admission import openapi, routes
from services.admission.core import Admission
from services.admission.domain import waiting
from services.admission.parsing import BodyParser
from services.admission.routes import error_answer as _err
from shared import tracing
from shared.domain import errors
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
    """The app: ``routes.router``, the ``Envelope`` middleware, the error handlers, and the
    ``Wiring`` the routes' dependencies read (``app.state.wiring``)."""
    app = FastAPI(
        title="Session Core",
        version="1.0.0",
        description="Admits, stores, routes and confirms the input of AI-agent sessions.",
    )
    keys = ApiKeys.parse(settings.api_keys)  # a malformed entry stops the service here

    def tenant_of(request: Request) -> str | None:
        if settings.auth_disabled:
            return DEFAULT_TENANT
        key = bearer(request.headers.get("authorization", ""))
        return None if key is None else keys.tenant_of(key)

    wiring = routes.Wiring(
        settings, get_admission, ready, BodyParser(),
        waiting.WaitSlots(settings.max_concurrent_waits,
                          settings.max_concurrent_waits_per_tenant),
        asyncio.Event())
    app.state.wiring = wiring
    app.state.parser = wiring.parser  # also the session.input topic's (app.py)
    app.state.closing = wiring.closing  # set by the server on shutdown (serving.py)
    # Requests of each tenant being handled now (docs/security.md, back-pressure).
    inflight: dict[str, int] = {}
    app.state.inflight = inflight
    app.add_middleware(Envelope, settings=settings, tenant_of=tenant_of, inflight=inflight,
                       tracer=tracer)
    app.include_router(routes.router)
    app.add_exception_handler(StarletteHTTPException, http_error)  # type: ignore[arg-type]
    app.add_exception_handler(routes.Refused, refused)  # type: ignore[arg-type]
    for exc_type in UNAVAILABLE:
        app.add_exception_handler(exc_type, dependency_away)
    app.add_exception_handler(Exception, crash)
    openapi.install(app)
    return app


async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
    """Unknown paths and methods answer in the contract's error shape too."""
    etype: errors.ErrorType = "not_found" if exc.status_code == 404 else "invalid_request"
    message = "no such endpoint" if exc.status_code == 404 else str(exc.detail)
    return JSONResponse({"error": {"type": etype, "message": message, "param": None}},
                        status_code=exc.status_code, headers=exc.headers)


async def refused(request: Request, exc: routes.Refused) -> Response:
    """A request a route's dependency refused (its body, ``wait`` or query)."""
    return _err(exc.error, exc.headers)


async def dependency_away(request: Request, exc: Exception) -> Response:
    """The one place where "the store (or broker) is unreachable" becomes an answer: 503
    ``unavailable`` with ``Retry-After``. Raised before anything was written, or while
    handing over — then the input may be on Kafka and a retry with the same idempotency id
    returns the stored result."""
    log.warning("http.unavailable", path=request.url.path, error=repr(exc))
    return _err(errors.unavailable(
        "a dependency (the store or the broker) is unreachable; nothing is lost by "
        "retrying with the same idempotency id"), {"Retry-After": RETRY_AFTER_S})


async def crash(request: Request, exc: Exception) -> Response:
    log.exception("http.unhandled", path=request.url.path)
    return _err(errors.ApiError("internal_error", "internal error", None))

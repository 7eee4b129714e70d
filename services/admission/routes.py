"""The routes of CONTRACT §1, module-level on one ``APIRouter``: each takes what its
dependencies parsed (the write's body and ``wait``, the Items query), the ``Admission`` and
the authenticated tenant, calls the use case and answers. ``http.py`` wires the router into the
app with the middleware, the exception handlers and the ``Wiring`` the dependencies read."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, generate_latest
from starlette.requests import ClientDisconnect

from services.admission.core import Admission, Answer, body_too_large
from services.admission.domain import waiting
from services.admission.parsing import BodyCheck, BodyParser, Checked
from shared.domain import errors
from shared.logging import get_logger
from shared.settings import Settings

log = get_logger("services.admission.http")  # the HTTP layer logs under one name (http.py's)

WAITS_ACTIVE = Gauge("session_core_waits_active",
                     "?wait=true requests admitted and waiting for their Turn now")
WAITS_REFUSED = Counter("session_core_waits_refused_total", "?wait=true requests refused (429)")
WAIT_RETRY_AFTER_S = 1

router = APIRouter()


@dataclass
class Wiring:
    """What the routes use of the app that serves them (``app.state.wiring``)."""

    settings: Settings
    get_admission: Callable[[], Admission]
    ready: Callable[[], Awaitable[bool]]
    parser: BodyParser  # bodies over 1 MiB parsed in a child process (parsing.py)
    slots: waiting.WaitSlots
    # Set on shutdown: every wait answers at once with its Items so far (202), so a stopping
    # replica does not hold its clients (and its own exit) for up to the 600 s budget.
    closing: asyncio.Event


class Refused(Exception):
    """A request refused before any use case runs; ``http.py`` answers it with its error."""

    def __init__(self, error: errors.ApiError, headers: dict[str, str] | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.headers = headers


def error_answer(err: errors.ApiError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def _json(answer: Answer) -> JSONResponse:
    return JSONResponse(answer.body, status_code=answer.status, headers=answer.headers)


@dataclass(frozen=True)
class Write:
    """A write's ``wait`` query and JSON body; for a large create body, its validation's
    verdict too (``checked``: validated in the body parser's child, parsing.py)."""

    wait: waiting.WaitRequest
    body: Any
    checked: Any = None


@dataclass(frozen=True)
class ItemsQuery:
    """``GET …/items``: the position, and the page size (``None`` when following)."""

    after: int
    limit: int | None


# -- dependencies ---------------------------------------------------------------------------

def wiring_of(request: Request) -> Wiring:
    wiring: Wiring = request.app.state.wiring
    return wiring


async def _wiring(request: Request) -> Wiring:
    return wiring_of(request)


async def _admission(wiring: Wired) -> Admission:
    return wiring.get_admission()


async def _tenant(request: Request) -> str:
    """The tenant the middleware authenticated (``default`` with auth disabled)."""
    tenant: str = request.state.tenant
    return tenant


async def _write(request: Request, wiring: Wired) -> Write:
    """A write's ``wait`` query and JSON body, or ``Refused`` with the error of either."""
    return await _write_checked(request, wiring, None)


async def _create_write(request: Request, wiring: Wired) -> Write:
    """A create's: a large body validated in the body parser's child as it is parsed."""
    return await _write_checked(request, wiring, lambda: wiring.get_admission().create_check())


async def _write_checked(request: Request, wiring: Wiring,
                         check: Callable[[], BodyCheck] | None) -> Write:
    wr = waiting.parse_wait(request.query_params)
    if isinstance(wr, errors.ApiError):
        raise Refused(wr)
    body = await read_body(request, wiring, check)
    if isinstance(body, errors.ApiError):
        raise Refused(body)
    if isinstance(body, Checked):
        return Write(wr, body.body, body.verdict)
    return Write(wr, body)


async def _items_query(request: Request) -> ItemsQuery:
    """``after``, ``limit`` and ``stream`` (a page needs a valid ``limit``, a stream ignores
    it); with ``stream=true``, ``Last-Event-ID`` (the last sequence the SSE client saw) wins
    over ``after`` so a reconnecting EventSource resumes without a gap or repeat."""
    after_raw = request.query_params.get("after", "0")
    limit_raw = request.query_params.get("limit", "100")
    stream_raw = request.query_params.get("stream", "false")
    if stream_raw not in ("true", "false"):
        raise Refused(errors.invalid("stream must be true or false", "stream"))
    resume = request.headers.get("last-event-id")
    if stream_raw == "true" and resume is not None:
        if not resume.isdigit():
            raise Refused(errors.invalid("Last-Event-ID must be an Item sequence",
                                         "Last-Event-ID"))
        after_raw = resume
    if not after_raw.isdigit():
        raise Refused(errors.invalid("after must be a non-negative integer", "after"))
    if stream_raw == "true":
        return ItemsQuery(int(after_raw), None)
    if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= 1000:
        raise Refused(errors.invalid("limit must be an integer from 1 to 1000", "limit"))
    return ItemsQuery(int(after_raw), int(limit_raw))


Wired = Annotated[Wiring, Depends(_wiring)]
Adm = Annotated[Admission, Depends(_admission)]
Tenant = Annotated[str, Depends(_tenant)]
Written = Annotated[Write, Depends(_write)]
CreateWritten = Annotated[Write, Depends(_create_write)]
Items = Annotated[ItemsQuery, Depends(_items_query)]


# -- routes (the order is the OpenAPI document's) -------------------------------------------

@router.post("/v1/sessions", status_code=201)
async def create_session(request: Request, write: CreateWritten, adm: Adm,
                         tenant: Tenant) -> Response:
    if isinstance(write.body, dict) and write.body.get("stream") is True:
        if write.wait.wait:
            return error_answer(errors.invalid("stream and wait cannot be combined", "wait"))
        return await _stream_create(adm, write, tenant)
    return await _admit(request, write.wait, adm,
                        lambda: adm.create_session(write.body, tenant=tenant,
                                                   checked=write.checked), None)


@router.post("/v1/sessions/{session_id}/events", status_code=202)
async def add_event(session_id: str, request: Request, write: Written, adm: Adm,
                    tenant: Tenant) -> Response:
    return await _admit(request, write.wait, adm,
                        lambda: adm.add_event(session_id, write.body, tenant=tenant), session_id)


@router.get("/v1/sessions/{session_id}")
async def get_session(session_id: str, adm: Adm, tenant: Tenant) -> Response:
    return _json(await adm.get_session(session_id, tenant=tenant))


@router.get("/v1/sessions/{session_id}/items")
async def list_items(session_id: str, query: Items, adm: Adm, tenant: Tenant) -> Response:
    if query.limit is None:
        return await _follow(adm, session_id, query.after, tenant)
    return _json(await adm.list_items(session_id, query.after, query.limit, tenant=tenant))


@router.get("/v1/sessions/{session_id}/tool_results/{call_id}")
async def get_tool_result(session_id: str, call_id: str, adm: Adm, tenant: Tenant) -> Response:
    return _json(await adm.get_tool_result(session_id, call_id, tenant=tenant))


@router.get("/healthz")
async def healthz() -> Response:
    return JSONResponse({"status": "ok"})


@router.get("/readyz")
async def readyz(wiring: Wired) -> Response:
    ok = await wiring.ready()
    return JSONResponse({"status": "ready" if ok else "not ready"},
                        status_code=200 if ok else 503)


@router.get("/metrics")
async def metrics() -> Response:
    """CONTRACT §1's metrics on the API port, less every sample that names a tenant: anyone
    who reaches the API could otherwise list the tenants and their in-flight load. The
    metrics port serves them all (docs/security.md)."""
    return Response(without_tenants(generate_latest()), media_type=CONTENT_TYPE_LATEST)


# -- what the routes call -------------------------------------------------------------------

def without_tenants(exposition: bytes) -> bytes:
    """A Prometheus text exposition less its samples with a ``tenant`` label (the families'
    HELP and TYPE lines stay: a family with no sample is valid)."""
    return b"\n".join(line for line in exposition.split(b"\n") if b'tenant="' not in line)


async def read_body(request: Request, wiring: Wiring,
                    check: Callable[[], BodyCheck] | None = None) -> Any | errors.ApiError:
    """The JSON body, read within ``body_read_timeout_s``: a client that sends it too slowly
    (or never) gets a 400 and frees its tenant's in-flight slot; one that goes away
    mid-upload is logged once at info (nobody reads the answer). A large body (over the
    parser's threshold, by its ``Content-Length`` or once that much has arrived) is read and
    parsed in its tenant's turn (``BodyParser.turn``); the wait for the turn does not count
    against the read's time. With ``check``, a large body comes back ``Checked``
    (``BodyParser.parse``)."""
    settings, parser = wiring.settings, wiring.parser
    limit = settings.max_body_bytes
    length = request.headers.get("content-length")
    declared = int(length) if length and length.isdigit() else 0
    if declared > limit:
        return body_too_large(limit)
    tenant: str = request.state.tenant
    large = declared > parser.threshold
    loop = asyncio.get_running_loop()
    async with contextlib.AsyncExitStack() as turn:
        if large:
            await turn.enter_async_context(parser.turn(tenant))
        chunks, size = [], 0
        try:
            async with asyncio.timeout(settings.body_read_timeout_s) as deadline:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        return body_too_large(limit)
                    chunks.append(chunk)
                    if not large and size > parser.threshold:  # no Content-Length said so
                        large, waited_from = True, loop.time()
                        await turn.enter_async_context(parser.turn(tenant))
                        deadline.reschedule((deadline.when() or loop.time())
                                            + loop.time() - waited_from)
        except TimeoutError:
            log.info("http.body_timeout", path=request.url.path, received=size,
                     timeout_s=settings.body_read_timeout_s)
            return errors.invalid(f"the request body was not received within "
                                  f"{settings.body_read_timeout_s:g} s", None)
        except ClientDisconnect:
            log.info("http.client_disconnected", path=request.url.path, received=size)
            return errors.invalid("the client went away before its body was received", None)
        return await parser.parse(b"".join(chunks), check)


async def _admit(request: Request, wr: waiting.WaitRequest, adm: Admission,
                 admit: Callable[[], Awaitable[Answer]], session_id: str | None) -> Response:
    if not wr.wait:
        return _json(await admit())
    return await _waiting(request, wr, adm, admit, session_id)


async def _waiting(request: Request, wr: waiting.WaitRequest, adm: Admission,
                   admit: Callable[[], Awaitable[Answer]], session_id: str | None) -> Response:
    """A wait slot first (429 before anything is admitted), then admission exactly as
    without ``wait``, then the Turn's Items until it ends, the budget runs out or the
    client goes away (which frees the slot at once)."""
    tenant: str = request.state.tenant
    slots = wiring_of(request).slots
    if not slots.acquire(tenant):
        WAITS_REFUSED.inc()
        return error_answer(errors.ApiError("rate_limited", "too many concurrent waits; retry "
                                            "later", None),
                            {"Retry-After": str(WAIT_RETRY_AFTER_S)})
    try:
        answer = await admit()
        sid = session_id or answer.session_id
        if answer.status >= 300 or sid is None:
            return _json(answer)
        return await _wait_turn(request, adm, answer, sid, wr.timeout_ms / 1000)
    finally:
        slots.release(tenant)


async def _wait_turn(request: Request, adm: Admission, answer: Answer, session_id: str,
                     budget: float) -> Response:
    watch = waiting.TurnWatch(list(answer.body.get("items", [])))
    q = adm.items.listen(session_id)
    collect = asyncio.create_task(_collect(adm, session_id, watch, q))
    gone = asyncio.create_task(_disconnected(request))
    stop = asyncio.create_task(wiring_of(request).closing.wait())
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


async def _stream_create(adm: Admission, write: Write, tenant: str) -> Response:
    # Validate and store first: an admission error is a plain JSON answer, never a stream.
    answer = await adm.create_session(write.body, tenant=tenant, checked=write.checked)
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
                             headers=SSE_HEADERS)


async def _follow(adm: Admission, session_id: str, after: int, tenant: str) -> Response:
    """``GET …/items?stream=true&after=N``: the stored Items after N, then every Item as it
    is published, as SSE events with ``id: <sequence>``, in sequence order, none twice.
    The listener attaches before the store is read, so nothing published in between is
    missed; a gap in what the tail delivers is filled from the store."""
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


# ingress-nginx and other proxies: no buffering
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

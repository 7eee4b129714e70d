"""A tenant's large bodies are read and parsed one at a time per replica (``BodyParser.turn``,
docs/decisions.md "A tenant's large bodies take turns"): the tenant's next large request waits
unread, by its ``Content-Length`` or once that much of it has arrived; another tenant's does
not wait; nothing is left behind once none waits."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from services.admission.domain.validation import Limits, validate_create
from services.admission.http import build_http_app
from services.admission.parsing import CHILD_PARSE_BYTES, BodyCheck, BodyParser
from shared.settings import Settings


async def test_a_tenants_turns_are_one_at_a_time_and_another_tenant_does_not_wait() -> None:
    parser = BodyParser()
    order: list[str] = []
    first_in, release = asyncio.Event(), asyncio.Event()

    async def body(tag: str, tenant: str) -> None:
        async with parser.turn(tenant):
            order.append(f"{tag} in")
            if tag == "a1":
                first_in.set()
                await release.wait()
            order.append(f"{tag} out")

    a1 = asyncio.create_task(body("a1", "tenantA"))
    await first_in.wait()
    a2 = asyncio.create_task(body("a2", "tenantA"))
    b1 = asyncio.create_task(body("b1", "tenantB"))
    await asyncio.wait_for(b1, 5)  # tenant B's turn is its own
    await asyncio.sleep(0.05)
    assert order == ["a1 in", "b1 in", "b1 out"]  # a2 waits for a1
    release.set()
    await asyncio.wait_for(asyncio.gather(a1, a2), 5)
    assert order[3:] == ["a1 out", "a2 in", "a2 out"]
    assert parser.turns == {}  # no tenant holds or waits


def _scope(length: int | None) -> dict[str, Any]:
    headers = [(b"host", b"core"), (b"content-type", b"application/json")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/v1/sessions",
            "raw_path": b"/v1/sessions", "query_string": b"", "root_path": "",
            "headers": headers, "client": ("127.0.0.1", 1), "server": ("core", 80)}


async def _status(app: Any, scope: dict[str, Any], receive: Any) -> int:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = json.loads(b"".join(m.get("body", b"") for m in sent
                               if m["type"] == "http.response.body"))
    assert body["error"]["type"] == "invalid_request"  # not JSON: refused at the parse
    status: int = start["status"]
    return status


async def test_a_tenants_second_large_body_is_not_read_until_the_first_is_parsed() -> None:
    """Over HTTP, one tenant (auth disabled: ``default``): the second request, large by its
    Content-Length, and the third, large only once its first chunk arrived (no
    Content-Length), read nothing more until the first request's body is parsed."""
    slots = ThreadPoolExecutor(1)

    class Checks:  # the one use of the Admission before a create's body is parsed
        def create_check(self) -> BodyCheck:
            return BodyCheck(validate_create, (Limits(),), slots)

    app = build_http_app(Settings(auth_disabled=True), Checks,  # type: ignore[arg-type]
                         _ready)
    half = b"x" * CHILD_PARSE_BYTES  # two of them: a large body (and not JSON: a 400)
    first_sent, go = asyncio.Event(), asyncio.Event()
    second_read, third_rest_read = asyncio.Event(), asyncio.Event()

    async def first() -> dict[str, Any]:
        if not first_sent.is_set():
            first_sent.set()
            return {"type": "http.request", "body": half, "more_body": True}
        await go.wait()
        return {"type": "http.request", "body": half, "more_body": False}

    async def second() -> dict[str, Any]:
        second_read.set()
        return {"type": "http.request", "body": half + half, "more_body": False}

    third_chunks = iter([half + b"x", half])

    async def third() -> dict[str, Any]:
        chunk = next(third_chunks)
        if chunk is half:
            third_rest_read.set()
        return {"type": "http.request", "body": chunk, "more_body": chunk is not half}

    try:
        one = asyncio.create_task(_status(app, _scope(2 * len(half)), first))
        await asyncio.wait_for(first_sent.wait(), 5)
        two = asyncio.create_task(_status(app, _scope(2 * len(half)), second))
        three = asyncio.create_task(_status(app, _scope(None), third))
        await asyncio.sleep(0.3)
        assert not second_read.is_set()  # waiting for its turn, unread
        assert not third_rest_read.is_set()  # its first chunk read, then waiting
        go.set()
        assert await asyncio.wait_for(asyncio.gather(one, two, three), 30) == [400, 400, 400]
        assert second_read.is_set() and third_rest_read.is_set()
        assert app.state.wiring.parser.turns == {}
    finally:
        app.state.wiring.parser.close()
        slots.shutdown()


async def _ready() -> bool:
    return True

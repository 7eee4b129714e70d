"""``session_core_client`` against the running system: a create retried after its
answer was lost yields one Session; a real 429 is retried after its ``Retry-After``; the Item
stream resumes after a dropped connection with no gap and no repeat."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from session_core_client import AsyncClient, Client, RetryPolicy, message, text_part
from tests.support.processes import ONE_WAIT, Core

pytestmark = pytest.mark.e2e

API_KEY = "e2e-key"
Json = dict[str, Any]


class LoseFirstAnswer(httpx.BaseTransport):
    """Sends the first POST to the server, lets it answer, then drops the answer (a connection
    that breaks after the server did the work)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.sent: list[bytes] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = self.inner.handle_request(request)
        if request.method == "POST":
            self.sent.append(request.read())
        if request.method == "POST" and len(self.sent) == 1:
            resp.read()
            resp.close()
            raise httpx.ReadError("connection dropped before the answer arrived",
                                  request=request)
        return resp


# make test-slow: a client retry rule; the server's idempotency proofs are in test_storage.py and
# test_wait.py
@pytest.mark.slow
def test_a_create_retried_after_a_lost_answer_yields_one_session(core: Core) -> None:
    transport = LoseFirstAnswer()
    sleeps: list[float] = []
    with Client(core.base_url, API_KEY, transport=transport, sleep=sleeps.append) as client:
        created = client.create_session("codex", "hello from the client library")
        again = client.get_session(created["id"])
    assert len(transport.sent) == 2 and transport.sent[0] == transport.sent[1], \
        "the retry must send the same body, with the same minted client_request_id"
    assert len(sleeps) == 1
    assert again["id"] == created["id"]
    # the same request id once more: still that one Session, nothing new written
    import json

    body = json.loads(transport.sent[0])
    with Client(core.base_url, API_KEY) as plain:
        third = plain.create_session("codex", "hello from the client library",
                                     client_request_id=body["client_request_id"])
    assert third["id"] == created["id"]


class Answers(httpx.BaseTransport):
    """Passes every request to the server and notes each POST's status and body."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.posts: list[tuple[int, bytes]] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = self.inner.handle_request(request)
        if request.method == "POST":
            self.posts.append((resp.status_code, request.read()))
        return resp


@pytest.fixture(scope="module")
def impatient_url(core: Core) -> Iterator[str]:
    """An admission replica that waits 1.5 s for storage's answer before its 504 (10 s by
    default): storage needs pausing only briefly, never long enough to lose its partitions."""
    name = "admission-client-impatient"
    url = core.admission_replica(name, {"SESSION_CORE_STORAGE_REPLY_TIMEOUT_MS": "1500"})
    try:
        yield url
    finally:
        core.stop(name)


@pytest.mark.slow  # make test-slow: a client retry rule (it waits for a real 504)
def test_a_real_504_is_retried_with_the_same_id_and_yields_one_session(
        core: Core, impatient_url: str) -> None:
    """Storage paused: admission publishes the create and answers 504 after its storage budget
    (the input is in Kafka). The client retries with the same client_request_id once storage
    runs again, and gets the one Session that first record made."""
    storage = core.procs["storage"].pid
    answers = Answers()
    sleeps: list[float] = []

    def resume_storage(seconds: float) -> None:
        sleeps.append(seconds)
        os.kill(storage, signal.SIGCONT)
        time.sleep(seconds)

    os.kill(storage, signal.SIGSTOP)
    try:
        with Client(impatient_url, API_KEY, transport=answers, sleep=resume_storage,
                    retry=RetryPolicy(attempts=6, backoff_s=1.0)) as client:
            created = client.create_session("codex", "stored late", timeout_s=60)
            items = list(client.items(created["id"]))
    finally:
        os.kill(storage, signal.SIGCONT)
    statuses = [status for status, _ in answers.posts]
    assert statuses[0] == 504 and statuses[-1] in (200, 201), statuses
    assert len({body for _, body in answers.posts}) == 1, "every retry must send the same id"
    assert sleeps
    assert [i["type"] for i in items].count("message") == 1, items


@pytest.fixture(scope="module")
def bounded_url(core: Core) -> Iterator[str]:
    """An admission replica that allows one concurrent wait (a real 429 past it)."""
    name = "admission-client-bounded"
    url = core.admission_replica(name, ONE_WAIT)
    try:
        yield url
    finally:
        core.stop(name)


async def _function_call(client: AsyncClient, sid: str, timeout: float = 30) -> Json:
    deadline = time.monotonic() + timeout
    while True:
        async for item in client.items(sid):
            if item["type"] == "function_call":
                return item
        assert time.monotonic() < deadline, "no function_call Item"
        await asyncio.sleep(0.2)


@pytest.mark.slow  # make test-slow: a client retry rule (it waits out Retry-After)
async def test_a_429_is_retried_after_retry_after(core: Core, bounded_url: str) -> None:
    async with AsyncClient(bounded_url, API_KEY) as plain:
        # hold the one wait slot: a waiting event on a Turn that waits for a function result
        held_session = await plain.create_session("claude_code",
                                                  'please call wait_here {"x": 1}')
        sid = held_session["id"]
        call = await _function_call(plain, sid)
        holder = asyncio.create_task(plain.send_message(sid, "steer and wait", wait=True,
                                                        timeout_ms=60_000))
        deadline = time.monotonic() + 20
        async with httpx.AsyncClient() as raw:
            while "session_core_waits_active 1.0" not in (
                    await raw.get(core.metrics_urls["admission-client-bounded"])).text:
                assert time.monotonic() < deadline, "the holder's wait never became active"
                await asyncio.sleep(0.1)

        delays: list[float] = []

        async def sleep_and_free(seconds: float) -> None:
            delays.append(seconds)
            if len(delays) == 1:  # free the slot: the held Turn gets its result and ends
                await plain.submit_tool_result(sid, call["call_id"], success=True, output="ok")
                held = await asyncio.wait_for(holder, 60)
                assert held["items"], held
            await asyncio.sleep(seconds)

        async with AsyncClient(bounded_url, API_KEY, sleep=sleep_and_free) as client:
            answer = await client.create_session("codex", "after the 429", wait=True,
                                                 timeout_ms=60_000)
    assert delays and delays[0] == 1.0, f"slept {delays}: the first retry must honour Retry-After"
    assert answer["id"].startswith("session_")
    assert any(i["type"] == "turn" and i["state"] == "completed" for i in answer["items"])


class DropStreamOnce(httpx.AsyncBaseTransport):
    """The first stream request is cut after ``after_events`` SSE events; later ones pass."""

    def __init__(self, after_events: int) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.after_events = after_events
        self.streams: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        resp = await self.inner.handle_async_request(request)
        if request.url.params.get("stream") != "true":
            return resp
        self.streams.append(request)
        if len(self.streams) > 1:
            return resp
        limit = self.after_events

        async def cut() -> AsyncIterator[bytes]:
            seen = 0
            async for chunk in resp.stream:  # type: ignore[union-attr]
                yield chunk
                seen += chunk.count(b"\n\n")
                if seen >= limit:
                    await resp.aclose()
                    raise httpx.RemoteProtocolError("peer closed the stream", request=request)

        return httpx.Response(resp.status_code, headers=resp.headers, stream=_Stream(cut()),
                              request=request)


class _Stream(httpx.AsyncByteStream):
    def __init__(self, it: AsyncIterator[bytes]) -> None:
        self.it = it

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.it:
            yield chunk


async def test_the_item_stream_resumes_after_a_dropped_connection(core: Core) -> None:
    transport = DropStreamOnce(after_events=2)
    async with AsyncClient(core.base_url, API_KEY) as plain:
        created = await plain.create_session(
            "codex", [message("first"), message(text_part("second"))], wait=True,
            timeout_ms=60_000)
        sid = created["id"]
        await plain.send_message(sid, "and a steer", wait=True, timeout_ms=60_000)
        stored = [it async for it in plain.items(sid)]
    assert len(stored) >= 4, stored
    seen: list[int] = []
    sleeps: list[float] = []

    async def no_sleep(s: float) -> None:
        sleeps.append(s)

    async with AsyncClient(core.base_url, API_KEY, transport=transport, sleep=no_sleep,
                           retry=RetryPolicy(attempts=3)) as client:
        async for item in client.stream_items(sid):
            seen.append(item["sequence"])
            if item["sequence"] == stored[-1]["sequence"]:
                break
    assert len(transport.streams) == 2, "the stream was not cut and resumed"
    resumed = transport.streams[1]
    assert resumed.headers["last-event-id"] == "2"
    assert seen == [it["sequence"] for it in stored], "a gap or a repeat across the resume"


async def test_follow_sends_items_published_after_it_attached(core: Core) -> None:
    """``?stream=true`` keeps following: an event sent after the stream started arrives."""
    async with AsyncClient(core.base_url, API_KEY) as client:
        created = await client.create_session("codex", "hello", wait=True, timeout_ms=60_000)
        sid = created["id"]
        before = [it async for it in client.items(sid)]
        marker = f"later-{uuid.uuid4().hex}"

        async def send_later() -> None:
            await asyncio.sleep(0.5)
            await client.send_message(sid, marker)

        sender = asyncio.create_task(send_later())
        got: list[Json] = []
        async for item in client.stream_items(sid, idle_timeout_s=30):
            got.append(item)
            if item["type"] == "message" and item["content"][0].get("text") == marker:
                break
        await sender
    assert [i["sequence"] for i in got] == list(range(1, len(got) + 1))
    assert len(got) > len(before)


class CountKeepAlives(httpx.HTTPTransport):
    """The real transport; counts the SSE keep-alive comments the server sends on streams."""

    def __init__(self) -> None:
        super().__init__()
        self.keep_alives = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        resp = super().handle_request(request)
        if request.url.params.get("stream") == "true":
            inner = resp.stream
            outer = self

            class Counting(httpx.SyncByteStream):
                def __iter__(self) -> Iterator[bytes]:
                    for chunk in inner:  # type: ignore[union-attr]
                        outer.keep_alives += chunk.count(b": keep-alive")
                        yield chunk

                def close(self) -> None:
                    inner.close()  # type: ignore[union-attr]

            resp.stream = Counting()
        return resp


@pytest.mark.slow  # make test-slow: a client rule that waits 17 s of idle stream
def test_an_idle_timeout_past_the_servers_keep_alive_still_ends_on_time(core: Core) -> None:
    """The server sends a keep-alive every 15 s; a follow with ``idle_timeout_s=17`` on a quiet
    Session ends 17 s after it started, not at the next keep-alive (30 s) nor never."""
    transport = CountKeepAlives()
    with Client(core.base_url, API_KEY, transport=transport) as client:
        created = client.create_session("codex", "then quiet", wait=True, timeout_ms=60_000)
        last = max(i["sequence"] for i in client.items(created["id"]))
        started = time.monotonic()
        got = list(client.stream_items(created["id"], after=last, idle_timeout_s=17))
        took = time.monotonic() - started
    assert got == []
    assert transport.keep_alives >= 1, "no keep-alive arrived: the case is not the one meant"
    assert 17 <= took < 18.5, f"ended after {took:.1f} s"

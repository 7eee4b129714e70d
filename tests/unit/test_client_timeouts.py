"""``session_core_client``'s retry, error and timeout rules (issue 59), each against the client
alone: an ``httpx.MockTransport`` that answers as the API would, or — where time on a real
socket is the point — a tiny local HTTP server (one function of the client under test, not the
system). The rules that need the server's own behaviour run on the real stack in
tests/e2e/test_client_library.py and tests/e2e/test_client_wheel.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from session_core_client import (
    ApiError,
    ApiTimeoutError,
    AsyncClient,
    AuthenticationError,
    BadRequestError,
    Client,
    ConflictError,
    GatewayTimeoutError,
    InternalServerError,
    NotFoundError,
    RateLimitError,
    RequestTooLargeError,
    RetryPolicy,
    ServiceUnavailableError,
    TransportError,
    UnprocessableEntityError,
)
from session_core_client.cli import main as cli
from session_core_client.core import (
    STREAM_READ_TIMEOUT_S,
    WAIT_MARGIN_S,
    Attempts,
    Call,
    ItemFollow,
    Tries,
)

# bounds wall time: `make test` runs it after the parallel run, alone (pyproject's `timing`)
pytestmark = pytest.mark.timing

SID = "session_" + "a" * 32
CREATED = {"id": SID, "items": []}


def _error(status: int, type_: str = "x", headers: dict[str, str] | None = None
           ) -> httpx.Response:
    return httpx.Response(status, headers={"x-request-id": f"req_{status}", **(headers or {})},
                          json={"error": {"type": type_, "message": "m", "param": None}})


def _client(answer: Any, attempts: int = 4, **kw: Any) -> tuple[Client, list[float]]:
    sleeps: list[float] = []
    return Client("http://core.test", "k", transport=httpx.MockTransport(answer),
                  sleep=sleeps.append, retry=RetryPolicy(attempts=attempts, jitter=0), **kw), sleeps


# ---------------------------------------------------------------- retries


@pytest.mark.parametrize(("status", "retry_after", "slept"), [
    (429, "2", 2.0),
    (503, "1", 1.0),
    (504, None, 0.25),  # no Retry-After: the backoff's first step
    (429, None, 0.25),
])
def test_retried_statuses_resend_the_same_body_after_retry_after_or_backoff(
        status: int, retry_after: str | None, slept: float) -> None:
    bodies: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        if len(bodies) == 1:
            return _error(status, headers={"Retry-After": retry_after} if retry_after else {})
        return httpx.Response(201, json=CREATED)

    client, sleeps = _client(answer)
    assert client.create_session("codex", "hi")["id"] == SID
    assert sleeps == [slept]
    assert len(bodies) == 2 and bodies[0] == bodies[1], "the retry must carry the same id"
    assert json.loads(bodies[0])["client_request_id"]


@pytest.mark.parametrize("failure", [
    httpx.ConnectError("refused"),
    httpx.ReadError("connection reset"),
    httpx.ReadTimeout("no answer"),
])
def test_connection_errors_and_timeouts_resend_the_same_body(failure: Exception) -> None:
    bodies: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        if len(bodies) == 1:
            raise failure
        return httpx.Response(202, json={"event_id": "e", "delivery": "started"})

    client, sleeps = _client(answer)
    client.send_message(SID, "hi")
    assert len(sleeps) == 1 and bodies[0] == bodies[1]


def test_the_backoff_is_jittered_within_its_bound() -> None:
    policy = RetryPolicy(backoff_s=1.0, jitter=0.2)
    delays = {policy.delay(0, None) for _ in range(50)}
    assert all(1.0 <= d <= 1.2 for d in delays)
    assert len(delays) > 1, "the same delay every time: no jitter"


def test_out_of_attempts_a_timeout_is_an_api_timeout_error() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer", request=request)

    client, sleeps = _client(answer, attempts=3)
    with pytest.raises(ApiTimeoutError, match="3 of 3 attempts"):
        client.get_session(SID)
    assert len(sleeps) == 2
    assert issubclass(ApiTimeoutError, TransportError)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(("status", "kind"), [
    (400, BadRequestError),
    (401, AuthenticationError),
    (404, NotFoundError),
    (409, ConflictError),
    (413, RequestTooLargeError),
    (422, UnprocessableEntityError),
    (429, RateLimitError),
    (500, InternalServerError),
    (503, ServiceUnavailableError),
    (504, GatewayTimeoutError),
])
def test_each_status_raises_its_error_with_request_id_and_headers(
        status: int, kind: type[ApiError]) -> None:
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return _error(status, "the_type", {"Retry-After": "0"})

    client, _ = _client(answer, attempts=2)
    with pytest.raises(ApiError) as raised:
        client.get_session(SID)
    err = raised.value
    assert type(err) is kind
    assert (err.status, err.type, err.request_id) == (status, "the_type", f"req_{status}")
    assert err.headers["retry-after"] == "0" and err.headers["X-Request-Id"] == f"req_{status}"
    retried = status in (429, 503, 504)
    assert len(calls) == (2 if retried else 1)


# ---------------------------------------------------------------- read timeouts


def _timeouts_seen(client_kw: dict[str, Any], call: Any) -> tuple[dict[str, Any], Any]:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=CREATED)

    client, _ = _client(answer, **client_kw)
    call(client)
    (request,) = seen
    return request.extensions["timeout"], dict(request.url.params)


def test_a_call_that_does_not_wait_has_the_clients_read_timeout() -> None:
    timeouts, _ = _timeouts_seen({}, lambda c: c.get_session(SID))
    assert timeouts["read"] == 30.0
    timeouts, _ = _timeouts_seen({"timeout_s": 7.0}, lambda c: c.get_session(SID))
    assert timeouts["read"] == 7.0


def test_one_call_overrides_the_read_timeout() -> None:
    timeouts, _ = _timeouts_seen({"timeout_s": 7.0},
                                 lambda c: c.items_page(SID, timeout_s=2.5))
    assert timeouts["read"] == 2.5


def test_a_wait_reads_for_its_budget_plus_the_margin() -> None:
    timeouts, params = _timeouts_seen({}, lambda c: c.create_session(
        "codex", "hi", wait=True, timeout_ms=5_000))
    assert timeouts["read"] == pytest.approx(5.0 + WAIT_MARGIN_S, abs=0.1)
    assert params["timeout_ms"] == "5000"
    timeouts, params = _timeouts_seen({}, lambda c: c.send_message(SID, "hi", wait=True))
    assert timeouts["read"] == pytest.approx(120.0 + WAIT_MARGIN_S, abs=0.1)


def test_a_retried_wait_asks_only_for_what_is_left_of_its_budget() -> None:
    now = [100.0]
    attempts = Attempts(Call("POST", "/v1/sessions", {}, {"wait": "true", "timeout_ms": "20000"}),
                        30.0, clock=lambda: now[0])
    params, first = attempts.next()
    assert params == {"wait": "true", "timeout_ms": "20000"} and first.read == 30.0
    now[0] += 8.0
    params, second = attempts.next()
    assert params == {"wait": "true", "timeout_ms": "12000"}
    assert second.read == pytest.approx(22.0)
    # no retry starts past the deadline (budget + margin after the first attempt)
    tries = Tries(RetryPolicy(attempts=10, jitter=0), "x", attempts.deadline,
                  clock=lambda: now[0])
    now[0] += 21.9
    assert tries.after_answer(_error(429, headers={"Retry-After": "1"})) is None


class SlowServer:
    """Accepts connections and answers after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                time.sleep(delay)
                with_body(self, 200, json.dumps(CREATED).encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def with_body(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def test_a_server_that_does_not_answer_times_out_on_a_real_socket() -> None:
    slow = SlowServer(delay=3.0)
    try:
        started = time.monotonic()
        with Client(slow.url, timeout_s=0.3,
                    retry=RetryPolicy(attempts=2, backoff_s=0.05, jitter=0)) as client:
            with pytest.raises(ApiTimeoutError):
                client.get_session(SID)
        assert time.monotonic() - started < 1.5
        assert slow.requests == 2
    finally:
        slow.close()


# ---------------------------------------------------------------- idle timeouts


class KeepAliveSse:
    """``GET …/items?stream=true``: the Items given, then an SSE keep-alive comment every
    ``every`` seconds and nothing else — bytes keep flowing, Items do not."""

    def __init__(self, items: list[dict[str, Any]], every: float = 1.0) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                outer.connections += 1
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("connection", "close")
                self.end_headers()
                try:
                    for it in items:
                        self.wfile.write(f"id: {it['sequence']}\nevent: item\n"
                                         f"data: {json.dumps(it)}\n\n".encode())
                    self.wfile.flush()
                    while not outer.stop.wait(every):
                        self.wfile.write(b": keep-alive\n\n")
                        self.wfile.flush()
                        outer.keep_alives += 1
                except OSError:
                    return

            def log_message(self, *args: Any) -> None:
                pass

        self.connections = 0
        self.keep_alives = 0
        self.stop = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


ITEM = {"id": "item_1", "session_id": SID, "sequence": 1, "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "hi"}], "created_at": "2026-01-01T00:00:00Z"}


@pytest.fixture
def sse() -> Iterator[KeepAliveSse]:
    server = KeepAliveSse([ITEM], every=1.0)
    yield server
    server.close()


def test_idle_timeout_counts_time_without_an_item_not_without_bytes(sse: KeepAliveSse) -> None:
    """Keep-alives every second restart httpx's read timeout; the follow still ends 2.5 s after
    its last Item — not at the next keep-alive after that (3 s), nor never."""
    assert STREAM_READ_TIMEOUT_S > 15  # the connection's own timeout is not what ends it
    got = []
    with Client(sse.url) as client:
        started = time.monotonic()
        for item in client.stream_items(SID, idle_timeout_s=2.5):
            got.append(item["sequence"])
        took = time.monotonic() - started
    assert got == [1]
    assert 2.5 <= took < 2.9, f"ended after {took:.2f} s"
    assert sse.keep_alives >= 2 and sse.connections == 1


def test_the_whole_follow_ends_at_timeout_s(sse: KeepAliveSse) -> None:
    with Client(sse.url) as client:
        started = time.monotonic()
        got = [it["sequence"] for it in client.stream_items(SID, timeout_s=1.5,
                                                            idle_timeout_s=60)]
        took = time.monotonic() - started
    assert got == [1] and 1.5 <= took < 1.9, took


def test_async_idle_timeout_counts_time_without_an_item(sse: KeepAliveSse) -> None:
    async def follow() -> tuple[list[int], float]:
        async with AsyncClient(sse.url) as client:
            started = time.monotonic()
            got = [it["sequence"] async for it in client.stream_items(SID, idle_timeout_s=2.5)]
            return got, time.monotonic() - started

    got, took = asyncio.run(follow())
    assert got == [1] and 2.5 <= took < 2.9, took


def test_cli_tail_follow_timeout_ends_while_keep_alives_flow(
        sse: KeepAliveSse, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code = cli.run(["tail", SID, "--api", sse.url, "--follow", "--timeout", "3"])
    took = time.monotonic() - started
    assert code == 0 and 3 <= took < 3.5, took
    assert capsys.readouterr().out.startswith("#1")
    assert sse.keep_alives >= 2


def test_cli_tail_until_turn_end_that_times_out_fails(
        sse: KeepAliveSse, capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    code = cli.run(["tail", SID, "--api", sse.url, "--follow", "--until-turn-end",
                    "--idle-timeout", "1.5"])
    took = time.monotonic() - started
    assert code == 1 and 1.5 <= took < 2.0, took
    assert "ended before a Turn did" in capsys.readouterr().err


def test_item_follow_idle_time_restarts_with_each_item_handed_over() -> None:
    now = [0.0]
    follow = ItemFollow(SID, 0, idle_timeout_s=5, timeout_s=12, clock=lambda: now[0])
    assert follow.left() == 5
    now[0] = 4.0
    follow.handed_over()
    now[0] = 8.0
    assert follow.left() == 1.0
    now[0] = 9.5
    follow.handed_over()
    assert follow.left() == 2.5  # the whole follow's end comes first
    now[0] = 12.0
    assert follow.expired() and follow.bounded(3.0) == 0.0
    assert ItemFollow(SID, 0).left() is None

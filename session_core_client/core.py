"""What the sync and async clients share — everything but the I/O: the retry decisions and the
timeouts of a call (``Tries``, ``Attempts``), the API's operations (``Api``, defined once; each
client only sends a ``Call``), request bodies, and following a Session's Items over SSE
(``ItemFollow``). The errors are in ``errors``."""

from __future__ import annotations

import email.utils
import json
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import httpx

from session_core_client import answers
from session_core_client.content import as_messages
from session_core_client.errors import ApiError as ApiError
from session_core_client.errors import ApiTimeoutError, TransportError

Json = dict[str, Any]
Clock = Callable[[], float]
# retried with the same idempotency id: rate limited, unavailable (nothing written), storage
# late (the input is in Kafka and will be stored: docs/admission.md)
RETRY_STATUSES = frozenset({429, 503, 504})
MAX_WAIT_MS = 600_000
DEFAULT_WAIT_MS = 120_000  # the server's wait budget when a call names none
DEFAULT_TIMEOUT_S = 30.0  # the read timeout of a call that does not wait
CONNECT_TIMEOUT_S = 10.0
WAIT_MARGIN_S = 10.0  # a wait's read timeout: its budget plus this
# a stream silent this long is dead (the server sends a keep-alive every 15 s): reconnect
STREAM_READ_TIMEOUT_S = 60.0


def timeout(read_s: float | None) -> httpx.Timeout:
    return httpx.Timeout(CONNECT_TIMEOUT_S, read=read_s)


def mint_id() -> str:
    return str(uuid.uuid4())


def retry_after_s(headers: httpx.Headers | dict[str, str], now: float | None = None
                  ) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date; None when absent or bad."""
    raw = headers.get("retry-after") or headers.get("Retry-After")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass
class RetryPolicy:
    """Retries for 429 / 503 / 504 answers, connection errors and timeouts. Safe for every write
    because the client mints the idempotency id before the first attempt and sends the same id
    again. Backoff: ``backoff_s`` doubling up to ``max_backoff_s``, each delay stretched by up to
    ``jitter`` (0.2 = up to 20 % longer, at random) so that clients refused together do not
    come back together; a ``Retry-After`` of the answer is slept instead (capped)."""

    attempts: int = 6
    backoff_s: float = 0.25
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to sleep before attempt ``attempt + 1`` (``attempt`` counts from 0)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s)
        base: float = min(self.max_backoff_s, self.backoff_s * 2.0 ** attempt)
        return base * (1 + self.jitter * self.rng.random())


def create_body(harness: str, input_: str | Json | list[Json], *, placement: str = "none",
                client_request_id: str | None = None, **envelope: Any) -> Json:
    body: Json = {"harness": harness, "placement": placement,
                  "input": input_ if isinstance(input_, str) else as_messages(input_),
                  "client_request_id": client_request_id or mint_id()}
    body.update({k: v for k, v in envelope.items() if v is not None})
    return body


def message_body(input_: str | Json | list[Json], *, client_event_id: str | None = None,
                 **envelope: Any) -> Json:
    body: Json = {"type": "agent.session.input.message", "input": as_messages(input_),
                  "client_event_id": client_event_id or mint_id()}
    body.update({k: v for k, v in envelope.items() if v is not None})
    return body


_ABSENT: Any = object()


def tool_result_body(call_id: str, *, success: bool, output: Any = _ABSENT, error: Any = _ABSENT,
                     client_event_id: str | None = None, **envelope: Any) -> Json:
    """``output`` and ``error`` are sent only when given (Core stores which were present)."""
    body: Json = {"type": "agent.session.input.tool_result", "call_id": call_id,
                  "success": success, "client_event_id": client_event_id or mint_id()}
    if output is not _ABSENT:
        body["output"] = output
    if error is not _ABSENT:
        body["error"] = error
    body.update({k: v for k, v in envelope.items() if v is not None})
    return body


def wait_params(wait: bool, timeout_ms: int | None) -> Json:
    if not wait:
        return {}
    params: Json = {"wait": "true"}
    if timeout_ms is not None:
        params["timeout_ms"] = str(min(timeout_ms, MAX_WAIT_MS))
    return params


@dataclass
class SseEvent:
    event: str
    data: str
    id: str | None


class SseParser:
    """Incremental ``text/event-stream`` parser (the WHATWG rules this API uses: ``event``,
    ``data`` (joined by newlines), ``id``, comments ignored, a blank line dispatches)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self.last_id: str | None = None

    def feed_line(self, line: str) -> SseEvent | None:
        if line == "":
            if not self._data and not self._event:
                return None
            ev = SseEvent(self._event or "message", "\n".join(self._data), self._id)
            if self._id is not None:
                self.last_id = self._id
            self._event, self._data, self._id = "", [], None
            return ev
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def feed(self, lines: Iterator[str]) -> Iterator[SseEvent]:
        for line in lines:
            ev = self.feed_line(line)
            if ev is not None:
                yield ev


def headers_for(api_key: str | None) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "session-core-client/0.1"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def decode(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return resp.text


class Tries:
    """The retry decisions of one call: after each attempt, how long to sleep before the
    next one, or ``None`` when the answer is final. Out of attempts — or of time, when the call
    has a ``deadline`` (``clock`` time) — on a connection error or a timeout it raises
    ``TransportError`` (``ApiTimeoutError`` after a timeout)."""

    def __init__(self, policy: RetryPolicy, what: str, deadline: float | None = None,
                 clock: Clock = time.monotonic) -> None:
        self.policy = policy
        self.what = what
        self.attempt = 0
        self.deadline = deadline
        self.clock = clock

    def _next(self, retry_after: float | None) -> float | None:
        if self.attempt + 1 >= self.policy.attempts:
            return None
        delay = self.policy.delay(self.attempt, retry_after)
        if self.deadline is not None and self.clock() + delay >= self.deadline:
            return None
        self.attempt += 1
        return delay

    def after_answer(self, resp: httpx.Response) -> float | None:
        if resp.status_code not in RETRY_STATUSES:
            return None
        return self._next(retry_after_s(resp.headers))

    def after_error(self, exc: Exception, retry: bool = True) -> float:
        delay = self._next(None) if retry else None
        if delay is None:
            kind = ApiTimeoutError if isinstance(exc, httpx.TimeoutException) else TransportError
            raise kind(f"cannot reach the API ({self.what}, {self.attempt + 1} of "
                       f"{self.policy.attempts} attempts): {exc!r}") from exc
        return delay

    def answered(self) -> None:
        """A stream was served: the next drop starts a fresh series of attempts."""
        self.attempt = 0


@dataclass(frozen=True)
class Call:
    """One API request, before any I/O. ``timeout_s``: the read timeout of each attempt, when
    the caller gives one."""

    method: str
    path: str
    body: Json | None = None
    params: Json | None = None
    timeout_s: float | None = None


class Attempts:
    """The timeouts of one call's attempts. The read timeout is the caller's, else for a wait
    (``?wait=true``) its budget plus ``WAIT_MARGIN_S``, else the client's default. A wait also
    has a deadline, budget plus margin after the first attempt: a retry asks the server only for
    what is left of the budget (``timeout_ms``), and no attempt starts after the deadline."""

    def __init__(self, call: Call, default_timeout_s: float, clock: Clock = time.monotonic
                 ) -> None:
        self.call = call
        self.clock = clock
        self.params = call.params or {}
        self.budget_ms = (int(self.params.get("timeout_ms", DEFAULT_WAIT_MS))
                          if self.params.get("wait") == "true" else None)
        self.deadline = (None if self.budget_ms is None
                         else clock() + self.budget_ms / 1000 + WAIT_MARGIN_S)
        self.read_s = (call.timeout_s if call.timeout_s is not None
                       else default_timeout_s if self.budget_ms is None
                       else self.budget_ms / 1000 + WAIT_MARGIN_S)

    def next(self) -> tuple[Json | None, httpx.Timeout]:
        """The query parameters and the timeout of the next attempt."""
        if self.deadline is None or self.budget_ms is None:
            return self.call.params, timeout(self.read_s)
        left = self.deadline - self.clock()
        budget_ms = max(1, min(self.budget_ms, round((left - WAIT_MARGIN_S) * 1000)))
        return ({**self.params, "timeout_ms": str(budget_ms)},
                timeout(max(0.001, min(self.read_s, left))))


R = TypeVar("R")


class Api(Generic[R]):
    """The API's operations, written once. ``send`` does the I/O: ``Client`` returns the
    answer's JSON, ``AsyncClient`` an awaitable of it. Writes carry an idempotency id minted
    here when the caller gives none, so retrying them is safe. ``timeout_s`` of any operation
    overrides the read timeout of its attempts (default: the client's ``timeout_s``, for a
    wait ``timeout_ms`` plus ``WAIT_MARGIN_S``)."""

    # What the agent said, picked out of Items any call returned (session_core_client.answers):
    # ``core.final_answer(answer["items"])`` after a ``wait=True`` call, in both faces.
    final_answer = staticmethod(answers.final_answer)
    final_answers = staticmethod(answers.final_answers)
    agent_messages = staticmethod(answers.agent_messages)

    def send(self, call: Call) -> R:
        raise NotImplementedError

    def create_session(self, harness: str, input: str | Json | list[Json], *,
                       placement: str = "none", client_request_id: str | None = None,
                       metadata: Json | None = None, tags: list[str] | None = None,
                       external_actor: Json | None = None, wait: bool = False,
                       timeout_ms: int | None = None, timeout_s: float | None = None) -> R:
        body = create_body(harness, input, placement=placement,
                           client_request_id=client_request_id, metadata=metadata, tags=tags,
                           external_actor=external_actor)
        return self.send(Call("POST", "/v1/sessions", body, wait_params(wait, timeout_ms),
                              timeout_s))

    def send_message(self, session_id: str, input: str | Json | list[Json], *,
                     client_event_id: str | None = None, metadata: Json | None = None,
                     tags: list[str] | None = None, external_actor: Json | None = None,
                     wait: bool = False, timeout_ms: int | None = None,
                     timeout_s: float | None = None) -> R:
        body = message_body(input, client_event_id=client_event_id, metadata=metadata,
                            tags=tags, external_actor=external_actor)
        return self.send(Call("POST", f"/v1/sessions/{session_id}/events", body,
                              wait_params(wait, timeout_ms), timeout_s))

    def submit_tool_result(self, session_id: str, call_id: str, *, success: bool,
                           output: Any = _ABSENT, error: Any = _ABSENT,
                           client_event_id: str | None = None, metadata: Json | None = None,
                           wait: bool = False, timeout_ms: int | None = None,
                           timeout_s: float | None = None) -> R:
        body = tool_result_body(call_id, success=success, output=output, error=error,
                                client_event_id=client_event_id, metadata=metadata)
        return self.send(Call("POST", f"/v1/sessions/{session_id}/events", body,
                              wait_params(wait, timeout_ms), timeout_s))

    def get_session(self, session_id: str, *, timeout_s: float | None = None) -> R:
        return self.send(Call("GET", f"/v1/sessions/{session_id}", timeout_s=timeout_s))

    def get_tool_result(self, session_id: str, call_id: str, *,
                        timeout_s: float | None = None) -> R:
        return self.send(Call("GET", f"/v1/sessions/{session_id}/tool_results/{call_id}",
                              timeout_s=timeout_s))

    def items_page(self, session_id: str, *, after: int = 0, limit: int = 100,
                   timeout_s: float | None = None) -> R:
        return self.send(Call("GET", f"/v1/sessions/{session_id}/items",
                              params={"after": after, "limit": limit}, timeout_s=timeout_s))


def next_after(page: Json) -> int | None:
    """Where the next page of ``items_page`` starts; ``None`` after the last one."""
    if not page.get("has_more") or not page["items"]:
        return None
    return int(page["next_after"])


class ItemFollow:
    """Following a Session's Items over SSE (``GET …/items?stream=true``), without the I/O:
    the request of each (re)connection resumes after the last sequence seen
    (``Last-Event-ID``), and an Item at or below it — a repeat after a resume — is dropped.

    When to stop is counted in Items, not bytes: ``idle_timeout_s`` is time without a new Item
    (the server's keep-alive comments do not count), ``timeout_s`` the whole follow; ``left``
    says how much of either is left. The read timeout of the connection,
    ``STREAM_READ_TIMEOUT_S``, only detects a dead connection (which is then resumed)."""

    def __init__(self, session_id: str, after: int, idle_timeout_s: float | None = None,
                 timeout_s: float | None = None, clock: Clock = time.monotonic) -> None:
        self.path = f"/v1/sessions/{session_id}/items"
        self.session_id = session_id
        self.last = after
        self.idle_timeout_s = idle_timeout_s
        self.clock = clock
        self.started = self.last_item_at = clock()
        self.end = None if timeout_s is None else self.started + timeout_s
        self.timeout = timeout(STREAM_READ_TIMEOUT_S)
        self.parser = SseParser()

    def left(self) -> float | None:
        """Seconds until the follow ends (0 when it has); None when it never does."""
        ends = [t for t in (self.end, None if self.idle_timeout_s is None
                            else self.last_item_at + self.idle_timeout_s) if t is not None]
        return None if not ends else max(0.0, min(ends) - self.clock())

    def expired(self) -> bool:
        return self.left() == 0.0

    def bounded(self, delay: float) -> float:
        """A sleep before reconnecting, cut to the time left."""
        left = self.left()
        return delay if left is None else min(delay, left)

    def handed_over(self) -> None:
        """The caller took an Item and asks for the next: the idle time starts again."""
        self.last_item_at = self.clock()

    def request(self) -> dict[str, Any]:
        """Keyword arguments of ``httpx.(Async)Client.stream("GET", follow.path, …)``."""
        self.parser = SseParser()
        headers = {"Accept": "text/event-stream"}
        if self.last:
            headers["Last-Event-ID"] = str(self.last)
        return {"params": {"stream": "true", "after": self.last}, "headers": headers,
                "timeout": self.timeout}

    def line(self, line: str) -> Json | None:
        """The new Item a line of the stream completes, if any."""
        ev = self.parser.feed_line(line)
        if ev is None or ev.event != "item":
            return None
        item: Json = json.loads(ev.data)
        seq = int(item["sequence"])
        if seq <= self.last:
            return None
        self.last = seq
        return item

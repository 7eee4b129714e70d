"""The synchronous client: ``Api``'s operations sent with ``httpx.Client``."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from session_core_client import core
from session_core_client.core import ApiError, Attempts, Call, ItemFollow, Json, RetryPolicy, Tries


class Client(core.Api[Json]):
    """``Client("http://127.0.0.1:8080", api_key=…)``; a context manager (closes the pool).
    Every operation of ``core.Api`` returns the answer's JSON or raises ``ApiError`` (its
    subclass for the status). ``timeout_s`` is the read timeout of a call that does not wait."""

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 timeout_s: float = core.DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self._sleep = sleep
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=core.headers_for(api_key),
                                  timeout=core.timeout(timeout_s), transport=transport)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    @property
    def http(self) -> httpx.Client:
        """The underlying ``httpx.Client`` (base URL and auth set)."""
        return self._http

    def request(self, call: Call) -> httpx.Response:
        """One API call with retries (429 / 503 / 504, connection errors, timeouts): the final
        answer, whatever its status; ``TransportError`` (``ApiTimeoutError``) if the API stays
        unreachable."""
        attempts = Attempts(call, self.timeout_s)
        tries = Tries(self.retry, f"{self._http.base_url} {call.method} {call.path}",
                      attempts.deadline)
        while True:
            params, timeout = attempts.next()
            try:
                resp = self._http.request(call.method, call.path, json=call.body, params=params,
                                          timeout=timeout)
            except httpx.TransportError as exc:
                self._sleep(tries.after_error(exc))
                continue
            delay = tries.after_answer(resp)
            if delay is None:
                return resp
            self._sleep(delay)

    def call(self, method: str, path: str, *, body: Json | None = None,
             params: Json | None = None, timeout_s: float | None = None) -> tuple[int, Any]:
        """``request``'s final status and decoded body."""
        resp = self.request(Call(method, path, body, params, timeout_s))
        return resp.status_code, core.decode(resp)

    def send(self, call: Call) -> Json:
        resp = self.request(call)
        if resp.status_code >= 400:
            raise ApiError.from_response(resp)
        result: Json = core.decode(resp)
        return result

    def items(self, session_id: str, *, after: int = 0, limit: int = 100) -> Iterator[Json]:
        """Every stored Item after ``after``, following ``has_more`` to the end."""
        cursor: int | None = after
        while cursor is not None:
            page = self.items_page(session_id, after=cursor, limit=limit)
            yield from page["items"]
            cursor = core.next_after(page)

    def stream_items(self, session_id: str, *, after: int = 0, reconnect: bool = True,
                     idle_timeout_s: float | None = None, timeout_s: float | None = None
                     ) -> Iterator[Json]:
        """Follow the Session's Items as they are published (``GET …/items?stream=true``).

        A dropped stream is resumed from the last sequence seen (``Last-Event-ID``), so no Item
        is missed or repeated. Stops when the server closes the stream and ``reconnect`` is
        false, after ``idle_timeout_s`` without a new Item (keep-alives do not count), or after
        ``timeout_s`` in all."""
        follow = ItemFollow(session_id, after, idle_timeout_s, timeout_s)
        tries = Tries(self.retry, f"stream of {session_id}")
        while not follow.expired():
            try:
                with self._http.stream("GET", follow.path, **follow.request()) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        delay = tries.after_answer(resp)
                        if delay is None:
                            raise ApiError.from_response(resp)
                        self._sleep(follow.bounded(delay))
                        continue
                    tries.answered()
                    with Watchdog(follow, resp):
                        for line in resp.iter_lines():
                            item = follow.line(line)
                            if item is not None:
                                yield item
                                follow.handed_over()
                            if follow.expired():
                                return
            except httpx.TransportError as exc:
                if follow.expired():  # the watchdog ended the read
                    return
                self._sleep(follow.bounded(tries.after_error(exc, retry=reconnect)))
                continue
            if not reconnect:
                return


class Watchdog:
    """Shuts a stream's socket down when its follow's time is up, so that a read blocked on a
    stream that carries only keep-alives returns then — httpx's read timeout restarts with
    every byte, keep-alives included, so it cannot end such a read. Without a socket to shut
    (a test transport) the follow ends at the first line after its time."""

    def __init__(self, follow: ItemFollow, resp: httpx.Response) -> None:
        self.follow = follow
        stream = resp.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        self.sock = sock if isinstance(sock, socket.socket) else None
        self.lock = threading.Lock()
        self.done = False
        self.timer: threading.Timer | None = None

    def __enter__(self) -> Watchdog:
        with self.lock:
            self._arm()
        return self

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.done = True
            if self.timer is not None:
                self.timer.cancel()

    def _arm(self) -> None:
        left = self.follow.left()
        if left is None or self.sock is None:
            return
        self.timer = threading.Timer(left, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        with self.lock:
            if self.done:
                return
            if not self.follow.expired():  # an Item came meanwhile: the deadline moved
                self._arm()
                return
            assert self.sock is not None
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)

"""The synchronous client: ``Api``'s operations sent with ``httpx.Client``."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from session_core_client import core
from session_core_client.core import ApiError, Call, ItemFollow, Json, RetryPolicy, Tries


class Client(core.Api[Json]):
    """``Client("http://127.0.0.1:8080", api_key=…)``; a context manager (closes the pool).
    Every operation of ``core.Api`` returns the answer's JSON or raises ``ApiError``."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 30.0,
                 retry: RetryPolicy | None = None, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=core.headers_for(api_key),
                                  timeout=httpx.Timeout(timeout_s, read=None), transport=transport)

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

    def call(self, method: str, path: str, *, body: Json | None = None,
             params: Json | None = None) -> tuple[int, Any]:
        """One API call with retries (429 / 503 / connection errors): the final status and
        decoded body, whatever the status; ``TransportError`` if the API stays unreachable."""
        tries = Tries(self.retry, f"{self._http.base_url} {method} {path}")
        while True:
            try:
                resp = self._http.request(method, path, json=body, params=params)
            except httpx.TransportError as exc:
                self._sleep(tries.after_error(exc))
                continue
            delay = tries.after_answer(resp)
            if delay is None:
                return resp.status_code, core.decode(resp)
            self._sleep(delay)

    def send(self, call: Call) -> Json:
        status, data = self.call(call.method, call.path, body=call.body, params=call.params)
        if status >= 400:
            raise ApiError.from_body(status, data)
        result: Json = data
        return result

    def items(self, session_id: str, *, after: int = 0, limit: int = 100) -> Iterator[Json]:
        """Every stored Item after ``after``, following ``has_more`` to the end."""
        cursor: int | None = after
        while cursor is not None:
            page = self.items_page(session_id, after=cursor, limit=limit)
            yield from page["items"]
            cursor = core.next_after(page)

    def stream_items(self, session_id: str, *, after: int = 0, reconnect: bool = True,
                     idle_timeout_s: float | None = None) -> Iterator[Json]:
        """Follow the Session's Items as they are published (``GET …/items?stream=true``).

        A dropped stream is resumed from the last sequence seen (``Last-Event-ID``), so no Item
        is missed or repeated. Stops when the server closes the stream and ``reconnect`` is
        false, or after ``idle_timeout_s`` without an event."""
        follow = ItemFollow(session_id, after, idle_timeout_s)
        tries = Tries(self.retry, f"stream of {session_id}")
        while True:
            try:
                with self._http.stream("GET", follow.path, **follow.request()) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        delay = tries.after_answer(resp)
                        if delay is None:
                            raise ApiError.from_response(resp)
                        self._sleep(delay)
                        continue
                    tries.answered()
                    for line in resp.iter_lines():
                        item = follow.line(line)
                        if item is not None:
                            yield item
            except httpx.ReadTimeout:
                return
            except httpx.TransportError as exc:
                self._sleep(tries.after_error(exc, retry=reconnect))
                continue
            if not reconnect:
                return

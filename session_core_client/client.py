"""The synchronous client."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx

from session_core_client import core
from session_core_client.core import (
    _ABSENT,
    RETRY_STATUSES,
    ApiError,
    Json,
    RetryPolicy,
    SseParser,
    TransportError,
)


class Client:
    """``Client("http://127.0.0.1:8080", api_key=…)``; a context manager (closes the pool)."""

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

    # ------------------------------------------------------------------ plumbing
    @property
    def http(self) -> httpx.Client:
        """The underlying ``httpx.Client`` (base URL and auth set)."""
        return self._http

    def call(self, method: str, path: str, *, body: Json | None = None,
             params: Json | None = None) -> tuple[int, Any]:
        """One API call with retries (429 / 503 / connection errors): the final status and
        decoded body, whatever the status; ``TransportError`` if the API stays unreachable."""
        last: Exception | None = None
        for attempt in range(self.retry.attempts):
            try:
                resp = self._http.request(method, path, json=body, params=params)
            except httpx.TransportError as exc:
                last = exc
                if attempt + 1 < self.retry.attempts:
                    self._sleep(self.retry.delay(attempt, None))
                continue
            if resp.status_code in RETRY_STATUSES and attempt + 1 < self.retry.attempts:
                self._sleep(self.retry.delay(attempt, core.retry_after_s(resp.headers)))
                continue
            try:
                return resp.status_code, resp.json()
            except ValueError:
                return resp.status_code, resp.text
        raise TransportError(f"cannot reach the API at {self._http.base_url} "
                             f"({method} {path}, {self.retry.attempts} attempts): {last}")

    def request(self, method: str, path: str, *, body: Json | None = None,
                params: Json | None = None) -> Json:
        """One API call with retries; the JSON body of a 2xx answer, else ``ApiError``."""
        status, data = self.call(method, path, body=body, params=params)
        if status >= 400:
            raise ApiError.from_body(status, data)
        result: Json = data
        return result

    # ------------------------------------------------------------------ the API
    def create_session(self, harness: str, input: str | Json | list[Json], *,
                       placement: str = "none", client_request_id: str | None = None,
                       metadata: Json | None = None, tags: list[str] | None = None,
                       external_actor: Json | None = None, wait: bool = False,
                       timeout_ms: int | None = None) -> Json:
        body = core.create_body(harness, input, placement=placement,
                                client_request_id=client_request_id, metadata=metadata,
                                tags=tags, external_actor=external_actor)
        return self.request("POST", "/v1/sessions", body=body,
                            params=core.wait_params(wait, timeout_ms))

    def send_message(self, session_id: str, input: str | Json | list[Json], *,
                     client_event_id: str | None = None, metadata: Json | None = None,
                     tags: list[str] | None = None, external_actor: Json | None = None,
                     wait: bool = False, timeout_ms: int | None = None) -> Json:
        body = core.message_body(input, client_event_id=client_event_id, metadata=metadata,
                                 tags=tags, external_actor=external_actor)
        return self.request("POST", f"/v1/sessions/{session_id}/events", body=body,
                            params=core.wait_params(wait, timeout_ms))

    def submit_tool_result(self, session_id: str, call_id: str, *, success: bool,
                           output: Any = _ABSENT, error: Any = _ABSENT,
                           client_event_id: str | None = None, metadata: Json | None = None,
                           wait: bool = False, timeout_ms: int | None = None) -> Json:
        body = core.tool_result_body(call_id, success=success, output=output, error=error,
                                     client_event_id=client_event_id, metadata=metadata)
        return self.request("POST", f"/v1/sessions/{session_id}/events", body=body,
                            params=core.wait_params(wait, timeout_ms))

    def get_session(self, session_id: str) -> Json:
        return self.request("GET", f"/v1/sessions/{session_id}")

    def get_tool_result(self, session_id: str, call_id: str) -> Json:
        return self.request("GET", f"/v1/sessions/{session_id}/tool_results/{call_id}")

    def items_page(self, session_id: str, *, after: int = 0, limit: int = 100) -> Json:
        return self.request("GET", f"/v1/sessions/{session_id}/items",
                            params={"after": after, "limit": limit})

    def items(self, session_id: str, *, after: int = 0, limit: int = 100) -> Iterator[Json]:
        """Every stored Item after ``after``, following ``has_more`` to the end."""
        while True:
            page = self.items_page(session_id, after=after, limit=limit)
            yield from page["items"]
            if not page.get("has_more") or not page["items"]:
                return
            after = int(page["next_after"])

    def stream_items(self, session_id: str, *, after: int = 0, reconnect: bool = True,
                     idle_timeout_s: float | None = None) -> Iterator[Json]:
        """Follow the Session's Items as they are published (``GET …/items?stream=true``).

        A dropped stream is resumed from the last sequence seen (``Last-Event-ID``), so no Item
        is missed or repeated. Stops when the server closes the stream and ``reconnect`` is
        false, or after ``idle_timeout_s`` without an event."""
        last = after
        attempt = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last:
                headers["Last-Event-ID"] = str(last)
            try:
                with self._http.stream(
                        "GET", f"/v1/sessions/{session_id}/items",
                        params={"stream": "true", "after": last}, headers=headers,
                        timeout=httpx.Timeout(30.0, read=idle_timeout_s)) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        if resp.status_code in RETRY_STATUSES and attempt + 1 < \
                                self.retry.attempts:
                            self._sleep(self.retry.delay(attempt,
                                                         core.retry_after_s(resp.headers)))
                            attempt += 1
                            continue
                        raise ApiError.from_response(resp)
                    attempt = 0
                    for ev in SseParser().feed(resp.iter_lines()):
                        if ev.event != "item":
                            continue
                        item: Json = json.loads(ev.data)
                        seq = int(item["sequence"])
                        if seq <= last:
                            continue
                        last = seq
                        yield item
            except httpx.ReadTimeout:
                return
            except httpx.TransportError as exc:
                if not reconnect or attempt + 1 >= self.retry.attempts:
                    raise TransportError(f"stream of {session_id}: {exc}") from exc
                self._sleep(self.retry.delay(attempt, None))
                attempt += 1
                continue
            if not reconnect:
                return

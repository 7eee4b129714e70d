"""The asyncio client: the same calls as ``Client``, awaited."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
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


class AsyncClient:
    """``async with AsyncClient(base_url, api_key=…) as c: await c.create_session(…)``."""

    def __init__(self, base_url: str, api_key: str | None = None, *, timeout_s: float = 30.0,
                 retry: RetryPolicy | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"),
                                       headers=core.headers_for(api_key),
                                       timeout=httpx.Timeout(timeout_s, read=None),
                                       transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def http(self) -> httpx.AsyncClient:
        return self._http

    async def call(self, method: str, path: str, *, body: Json | None = None,
                   params: Json | None = None) -> tuple[int, Any]:
        """As ``Client.call``."""
        last: Exception | None = None
        for attempt in range(self.retry.attempts):
            try:
                resp = await self._http.request(method, path, json=body, params=params)
            except httpx.TransportError as exc:
                last = exc
                if attempt + 1 < self.retry.attempts:
                    await self._sleep(self.retry.delay(attempt, None))
                continue
            if resp.status_code in RETRY_STATUSES and attempt + 1 < self.retry.attempts:
                await self._sleep(self.retry.delay(attempt, core.retry_after_s(resp.headers)))
                continue
            try:
                return resp.status_code, resp.json()
            except ValueError:
                return resp.status_code, resp.text
        raise TransportError(f"cannot reach the API at {self._http.base_url} "
                             f"({method} {path}, {self.retry.attempts} attempts): {last}")

    async def request(self, method: str, path: str, *, body: Json | None = None,
                      params: Json | None = None) -> Json:
        status, data = await self.call(method, path, body=body, params=params)
        if status >= 400:
            raise ApiError.from_body(status, data)
        result: Json = data
        return result

    async def create_session(self, harness: str, input: str | Json | list[Json], *,
                             placement: str = "none", client_request_id: str | None = None,
                             metadata: Json | None = None, tags: list[str] | None = None,
                             external_actor: Json | None = None, wait: bool = False,
                             timeout_ms: int | None = None) -> Json:
        body = core.create_body(harness, input, placement=placement,
                                client_request_id=client_request_id, metadata=metadata,
                                tags=tags, external_actor=external_actor)
        return await self.request("POST", "/v1/sessions", body=body,
                                  params=core.wait_params(wait, timeout_ms))

    async def send_message(self, session_id: str, input: str | Json | list[Json], *,
                           client_event_id: str | None = None, metadata: Json | None = None,
                           tags: list[str] | None = None, external_actor: Json | None = None,
                           wait: bool = False, timeout_ms: int | None = None) -> Json:
        body = core.message_body(input, client_event_id=client_event_id, metadata=metadata,
                                 tags=tags, external_actor=external_actor)
        return await self.request("POST", f"/v1/sessions/{session_id}/events", body=body,
                                  params=core.wait_params(wait, timeout_ms))

    async def submit_tool_result(self, session_id: str, call_id: str, *, success: bool,
                                 output: Any = _ABSENT, error: Any = _ABSENT,
                                 client_event_id: str | None = None,
                                 metadata: Json | None = None, wait: bool = False,
                                 timeout_ms: int | None = None) -> Json:
        body = core.tool_result_body(call_id, success=success, output=output, error=error,
                                     client_event_id=client_event_id, metadata=metadata)
        return await self.request("POST", f"/v1/sessions/{session_id}/events", body=body,
                                  params=core.wait_params(wait, timeout_ms))

    async def get_session(self, session_id: str) -> Json:
        return await self.request("GET", f"/v1/sessions/{session_id}")

    async def get_tool_result(self, session_id: str, call_id: str) -> Json:
        return await self.request("GET", f"/v1/sessions/{session_id}/tool_results/{call_id}")

    async def items_page(self, session_id: str, *, after: int = 0, limit: int = 100) -> Json:
        return await self.request("GET", f"/v1/sessions/{session_id}/items",
                                  params={"after": after, "limit": limit})

    async def items(self, session_id: str, *, after: int = 0, limit: int = 100
                    ) -> AsyncIterator[Json]:
        while True:
            page = await self.items_page(session_id, after=after, limit=limit)
            for item in page["items"]:
                yield item
            if not page.get("has_more") or not page["items"]:
                return
            after = int(page["next_after"])

    async def stream_items(self, session_id: str, *, after: int = 0, reconnect: bool = True,
                           idle_timeout_s: float | None = None) -> AsyncIterator[Json]:
        """As ``Client.stream_items``: resumes from the last sequence seen after a drop."""
        last = after
        attempt = 0
        while True:
            headers = {"Accept": "text/event-stream"}
            if last:
                headers["Last-Event-ID"] = str(last)
            try:
                async with self._http.stream(
                        "GET", f"/v1/sessions/{session_id}/items",
                        params={"stream": "true", "after": last}, headers=headers,
                        timeout=httpx.Timeout(30.0, read=idle_timeout_s)) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        if resp.status_code in RETRY_STATUSES and attempt + 1 < \
                                self.retry.attempts:
                            await self._sleep(self.retry.delay(
                                attempt, core.retry_after_s(resp.headers)))
                            attempt += 1
                            continue
                        raise ApiError.from_response(resp)
                    attempt = 0
                    parser = SseParser()
                    async for line in resp.aiter_lines():
                        ev = parser.feed_line(line)
                        if ev is None or ev.event != "item":
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
                await self._sleep(self.retry.delay(attempt, None))
                attempt += 1
                continue
            if not reconnect:
                return

"""The asyncio client: ``Api``'s operations sent with ``httpx.AsyncClient``, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import httpx

from session_core_client import core
from session_core_client.core import ApiError, Call, ItemFollow, Json, RetryPolicy, Tries


class AsyncClient(core.Api[Coroutine[Any, Any, Json]]):
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
        tries = Tries(self.retry, f"{self._http.base_url} {method} {path}")
        while True:
            try:
                resp = await self._http.request(method, path, json=body, params=params)
            except httpx.TransportError as exc:
                await self._sleep(tries.after_error(exc))
                continue
            if (delay := tries.after_answer(resp)) is None:
                return resp.status_code, core.decode(resp)
            await self._sleep(delay)

    async def send(self, call: Call) -> Json:
        status, data = await self.call(call.method, call.path, body=call.body,
                                       params=call.params)
        if status >= 400:
            raise ApiError.from_body(status, data)
        result: Json = data
        return result

    async def items(self, session_id: str, *, after: int = 0, limit: int = 100
                    ) -> AsyncIterator[Json]:
        cursor: int | None = after
        while cursor is not None:
            page = await self.items_page(session_id, after=cursor, limit=limit)
            for item in page["items"]:
                yield item
            cursor = core.next_after(page)

    async def stream_items(self, session_id: str, *, after: int = 0, reconnect: bool = True,
                           idle_timeout_s: float | None = None) -> AsyncIterator[Json]:
        """As ``Client.stream_items``: resumes from the last sequence seen after a drop."""
        follow = ItemFollow(session_id, after, idle_timeout_s)
        tries = Tries(self.retry, f"stream of {session_id}")
        while True:
            try:
                async with self._http.stream("GET", follow.path, **follow.request()) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        if (delay := tries.after_answer(resp)) is None:
                            raise ApiError.from_response(resp)
                        await self._sleep(delay)
                        continue
                    tries.answered()
                    async for line in resp.aiter_lines():
                        if (item := follow.line(line)) is not None:
                            yield item
            except httpx.ReadTimeout:
                return
            except httpx.TransportError as exc:
                await self._sleep(tries.after_error(exc, retry=reconnect))
                continue
            if not reconnect:
                return

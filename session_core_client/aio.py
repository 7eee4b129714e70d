"""The asyncio client: ``Api``'s operations sent with ``httpx.AsyncClient``, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import httpx

from session_core_client import core
from session_core_client.core import ApiError, Attempts, Call, ItemFollow, Json, RetryPolicy, Tries


class AsyncClient(core.Api[Coroutine[Any, Any, Json]]):
    """``async with AsyncClient(base_url, api_key=…) as c: await c.create_session(…)``."""

    def __init__(self, base_url: str, api_key: str | None = None, *,
                 timeout_s: float = core.DEFAULT_TIMEOUT_S, retry: RetryPolicy | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.retry = retry or RetryPolicy()
        self.timeout_s = timeout_s
        self._sleep = sleep
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"),
                                       headers=core.headers_for(api_key),
                                       timeout=core.timeout(timeout_s), transport=transport)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def http(self) -> httpx.AsyncClient:
        return self._http

    async def request(self, call: Call) -> httpx.Response:
        """As ``Client.request``."""
        attempts = Attempts(call, self.timeout_s)
        tries = Tries(self.retry, f"{self._http.base_url} {call.method} {call.path}",
                      attempts.deadline)
        while True:
            params, timeout = attempts.next()
            try:
                resp = await self._http.request(call.method, call.path, json=call.body,
                                                params=params, timeout=timeout)
            except httpx.TransportError as exc:
                await self._sleep(tries.after_error(exc))
                continue
            if (delay := tries.after_answer(resp)) is None:
                return resp
            await self._sleep(delay)

    async def call(self, method: str, path: str, *, body: Json | None = None,
                   params: Json | None = None, timeout_s: float | None = None
                   ) -> tuple[int, Any]:
        """As ``Client.call``."""
        resp = await self.request(Call(method, path, body, params, timeout_s))
        return resp.status_code, core.decode(resp)

    async def send(self, call: Call) -> Json:
        resp = await self.request(call)
        if resp.status_code >= 400:
            raise ApiError.from_response(resp)
        result: Json = core.decode(resp)
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
                           idle_timeout_s: float | None = None, timeout_s: float | None = None
                           ) -> AsyncIterator[Json]:
        """As ``Client.stream_items``: resumes from the last sequence seen after a drop; ends
        after ``idle_timeout_s`` without a new Item (keep-alives do not count) or ``timeout_s``
        in all."""
        follow = ItemFollow(session_id, after, idle_timeout_s, timeout_s)
        tries = Tries(self.retry, f"stream of {session_id}")
        while not follow.expired():
            try:
                async with self._http.stream("GET", follow.path, **follow.request()) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        if (delay := tries.after_answer(resp)) is None:
                            raise ApiError.from_response(resp)
                        await self._sleep(follow.bounded(delay))
                        continue
                    tries.answered()
                    lines = resp.aiter_lines()
                    while True:
                        try:
                            async with asyncio.timeout(follow.left()):
                                line = await anext(lines)
                        except TimeoutError:  # the follow's time is up, keep-alives or not
                            return
                        except StopAsyncIteration:
                            break
                        if (item := follow.line(line)) is not None:
                            yield item
                            follow.handed_over()
            except httpx.TransportError as exc:
                if follow.expired():
                    return
                await self._sleep(follow.bounded(tries.after_error(exc, retry=reconnect)))
                continue
            if not reconnect:
                return

"""Per-instance tails of two topics, read with plain aiokafka (no consumer group): the storage
reply topic (answers by ``request_id``) and the Item topic (SSE streams and ``?wait=true``).
Positions are resolved at the end of every partition before the service reports ready, so no
answer published after start-up can be missed."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from shared import records, typedrecords
from shared.kafka import DeadLetters
from shared.settings import Settings
from shared.tail import Tail


class ReplyTail(Tail):
    def __init__(self, settings: Settings, topic: str, dlq: DeadLetters) -> None:
        super().__init__(settings, topic, typedrecords.STORAGE_REPLY, dlq)
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def expect(self, request_id: str) -> asyncio.Future[dict[str, Any]]:
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = fut
        return fut

    def forget(self, request_id: str) -> None:
        self.waiting.pop(request_id, None)

    def dispatch(self, value: dict[str, Any]) -> None:
        fut = self.waiting.pop(str(value.get("request_id")), None)
        if fut is not None and not fut.done():
            fut.set_result(value)


class ItemTail(Tail):
    """Fans Items out to local listeners by session_id (SSE streams, waits)."""

    def __init__(self, settings: Settings, topic: str, dlq: DeadLetters) -> None:
        super().__init__(settings, topic, typedrecords.ITEM, dlq)
        self.listeners: dict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)

    def listen(self, session_id: str) -> asyncio.Queue[dict[str, Any]]:
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.listeners[session_id].add(q)
        return q

    def unlisten(self, session_id: str, q: asyncio.Queue[dict[str, Any]]) -> None:
        qs = self.listeners.get(session_id)
        if qs is not None:
            qs.discard(q)
            if not qs:
                self.listeners.pop(session_id, None)

    def dispatch(self, value: dict[str, Any]) -> None:
        listeners = list(self.listeners.get(str(value.get("session_id")), ()))
        if listeners:
            item = records.public_item(value)
            for q in listeners:
                q.put_nowait(item)

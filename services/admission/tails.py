"""Per-instance tails of two topics, read with plain aiokafka (no consumer group): the storage
reply topic (answers by ``request_id``) and the Item topic (SSE streams and ``?wait=true``).
Positions are resolved at the end of every partition before the service reports ready, so no
answer published after start-up can be missed.

Tracing on, a record handed to a waiter (an answer to its request, an Item to a Session's
streams and waits) is a CONSUMER span ``process <topic>``, the child of the context its headers
carry: the waiting request's trace shows its answer arriving. A record nobody here waits for
makes none (the Item tail reads every Session's Items)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from contextlib import AbstractContextManager
from typing import Any

from opentelemetry.trace import Span, Tracer

from shared import records, tracing
from shared.kafka import DeadLetters
from shared.messages import decode
from shared.settings import Settings
from shared.tail import Tail


def handing(tracer: Tracer | None, record: Any, **attributes: Any
            ) -> AbstractContextManager[Span | None]:
    """The span of ``record`` handed to its waiters; nothing when tracing is off or the value
    came without its record."""
    return tracing.consuming(tracer if record is not None else None, record, **attributes)


class ReplyTail(Tail):
    def __init__(self, settings: Settings, topic: str, dlq: DeadLetters,
                 tracer: Tracer | None = None) -> None:
        super().__init__(settings, topic, decode.STORAGE_REPLY, dlq)
        self.waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.tracer = tracer

    def expect(self, request_id: str) -> asyncio.Future[dict[str, Any]]:
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = fut
        return fut

    def forget(self, request_id: str) -> None:
        self.waiting.pop(request_id, None)

    def dispatch(self, value: dict[str, Any], record: Any = None) -> None:
        rid = str(value.get("request_id"))
        fut = self.waiting.pop(rid, None)
        if fut is not None and not fut.done():
            with handing(self.tracer, record, **{"session_core.request_id": rid[:128]}):
                fut.set_result(value)


class ItemTail(Tail):
    """Fans Items out to local listeners by session_id (SSE streams, waits)."""

    def __init__(self, settings: Settings, topic: str, dlq: DeadLetters,
                 tracer: Tracer | None = None) -> None:
        super().__init__(settings, topic, decode.ITEM, dlq)
        self.listeners: dict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)
        self.tracer = tracer

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

    def dispatch(self, value: dict[str, Any], record: Any = None) -> None:
        sid = str(value.get("session_id"))
        listeners = list(self.listeners.get(sid, ()))
        if listeners:
            item = records.public_item(value)
            with handing(self.tracer, record, **{
                    "session_core.session_id": sid, "session_core.item.type": str(item.get("type")),
                    "session_core.listeners": len(listeners)}):
                for q in listeners:
                    q.put_nowait(item)

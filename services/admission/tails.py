"""Per-instance tails of two topics, read with plain aiokafka (no consumer group): the storage
reply topic (answers by ``request_id``) and the Item topic (SSE streams and ``?wait=true``).
Positions are resolved at the end of every partition before the service reports ready, so no
answer published after start-up can be missed."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from shared.kafka import _admin_security, decode, max_record_bytes
from shared.logging import get_logger
from shared.settings import Settings

log = get_logger(__name__)


class Tail:
    def __init__(self, settings: Settings, topic: str) -> None:
        self.settings = settings
        self.topic = topic
        self.consumer: AIOKafkaConsumer | None = None
        self.task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    async def start(self) -> None:
        c = AIOKafkaConsumer(
            bootstrap_servers=self.settings.kafka_bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            max_partition_fetch_bytes=max_record_bytes(self.settings),
            fetch_max_bytes=max_record_bytes(self.settings) * 2,
            fetch_max_wait_ms=50,
            **_admin_security(self.settings),
        )
        await c.start()
        parts = None
        for _ in range(100):
            parts = c.partitions_for_topic(self.topic)
            if parts:
                break
            await c._client.force_metadata_update()
            await asyncio.sleep(0.1)
        tps = [TopicPartition(self.topic, p) for p in sorted(parts or [])]
        c.assign(tps)
        await c.seek_to_end(*tps)
        for tp in tps:
            await c.position(tp)
        self.consumer = c
        self.ready.set()
        self.task = asyncio.create_task(self._run(), name=f"tail:{self.topic}")

    async def _run(self) -> None:
        assert self.consumer is not None
        while True:
            try:
                batches = await self.consumer.getmany(timeout_ms=200)
                for records in batches.values():
                    for r in records:
                        try:
                            value = decode(r.value or b"")
                        except ValueError:
                            continue
                        if isinstance(value, dict):
                            self.dispatch(value)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("tail.error", topic=self.topic)
                await asyncio.sleep(0.5)

    def dispatch(self, value: dict[str, Any]) -> None:  # overridden
        raise NotImplementedError

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        if self.consumer:
            await self.consumer.stop()


class ReplyTail(Tail):
    def __init__(self, settings: Settings, topic: str) -> None:
        super().__init__(settings, topic)
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

    def __init__(self, settings: Settings, topic: str) -> None:
        super().__init__(settings, topic)
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
        for q in list(self.listeners.get(str(value.get("session_id")), ())):
            q.put_nowait(value)

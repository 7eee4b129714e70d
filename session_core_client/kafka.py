"""Producers that speak Kafka instead of HTTP: publish a request to ``session.input`` and await
its answer on ``session.input.results`` by ``request_id`` (CONTRACT §2). Needs ``aiokafka``
(``pip install 'session-core[kafka-client]'``); the HTTP client does not.

The answer record is ``{"request_id", "status", "body"}``: the same status and body the HTTP API
would have given. The request id doubles as the idempotency key of a create
(``client_request_id``) when the caller gives none, so a re-sent record never makes a second
Session.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from session_core_client.core import create_body, message_body, tool_result_body

Json = dict[str, Any]


class KafkaProducerClient:
    """``async with KafkaProducerClient(bootstrap, topic_prefix="") as k: await k.create(…)``."""

    def __init__(self, bootstrap_servers: str, *, topic_prefix: str = "",
                 tenant: str | None = None, **kafka: Any) -> None:
        self.input_topic = f"{topic_prefix}session.input"
        self.results_topic = f"{topic_prefix}session.input.results"
        self.tenant = tenant
        self._producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, acks="all",
                                          enable_idempotence=True, **kafka)
        # no consumer group (it moves nobody's offsets): every partition, from its end, so
        # only the answers to what this client sends are read
        self._consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers,
                                          enable_auto_commit=False, **kafka)
        self._waiting: dict[str, asyncio.Future[Json]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> KafkaProducerClient:
        await self._consumer.start()
        parts = None
        for _ in range(50):  # a consumer with no subscription learns every topic's partitions
            parts = self._consumer.partitions_for_topic(self.results_topic)
            if parts:
                break
            await self._consumer._client.force_metadata_update()
            await asyncio.sleep(0.1)
        if not parts:
            await self._consumer.stop()
            raise RuntimeError(f"topic {self.results_topic} does not exist")
        tps = [TopicPartition(self.results_topic, p) for p in sorted(parts)]
        self._consumer.assign(tps)
        await self._consumer.seek_to_end(*tps)
        for tp in tps:  # resolve the end offsets now, before anything is sent
            await self._consumer.position(tp)
        await self._producer.start()
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._reader:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        await self._producer.stop()
        await self._consumer.stop()

    async def _read(self) -> None:
        async for rec in self._consumer:
            try:
                value = json.loads(rec.value)
            except (TypeError, ValueError):
                continue
            fut = self._waiting.pop(str(value.get("request_id")), None) \
                if isinstance(value, dict) else None
            if fut is not None and not fut.done():
                fut.set_result(value)

    async def send(self, op: str, body: Json, *, session_id: str | None = None,
                   request_id: str | None = None, timeout_s: float = 30.0) -> Json:
        """Publish one request and return its answer record (``status`` and ``body``)."""
        rid = request_id or f"req_{uuid.uuid4().hex}"
        record: Json = {**body, "op": op, "request_id": rid}
        if session_id is not None:
            record["session_id"] = session_id
        if self.tenant is not None:
            record["tenant"] = self.tenant
        fut: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        key = (session_id or rid).encode()
        await self._producer.send_and_wait(self.input_topic, json.dumps(record).encode(), key=key)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._waiting.pop(rid, None)

    async def create(self, harness: str, input_: Any, **kw: Any) -> Json:
        timeout_s = kw.pop("timeout_s", 30.0)
        return await self.send("sessions.create", create_body(harness, input_, **kw),
                               timeout_s=timeout_s)

    async def message(self, session_id: str, input_: Any, **kw: Any) -> Json:
        timeout_s = kw.pop("timeout_s", 30.0)
        return await self.send("events.create", message_body(input_, **kw),
                               session_id=session_id, timeout_s=timeout_s)

    async def tool_result(self, session_id: str, call_id: str, **kw: Any) -> Json:
        timeout_s = kw.pop("timeout_s", 30.0)
        return await self.send("events.create", tool_result_body(call_id, **kw),
                               session_id=session_id, timeout_s=timeout_s)

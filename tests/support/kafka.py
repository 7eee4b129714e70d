"""Reading and writing the real topics and store from a test: a ``session.input`` producer that
waits for its answers, a whole topic read up to its end, the store's document counts, and a
function call opened by the fact storage turns into its Item."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pymongo import AsyncMongoClient

from shared import records
from shared.kafka import assign_all, decode, encode, stop_consumer
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.system import System

Json = dict[str, Any]
COLLECTIONS = ("sessions", "items", "journal", "idempotency", "calls")


class InputClient:
    """An event producer on ``session.input`` that reads its answers on
    ``session.input.results`` by ``request_id``."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.t = topics_for(settings)
        self.answers: dict[str, asyncio.Future[Json]] = {}
        self.producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers,
                                         acks="all", max_request_size=8 * 1024 * 1024)
        self.consumer = AIOKafkaConsumer(
            self.t.session_input_results, bootstrap_servers=settings.kafka_bootstrap_servers,
            group_id=f"test-results-{uuid.uuid4().hex[:8]}", auto_offset_reset="earliest")
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> InputClient:
        await self.producer.start()
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async for r in self.consumer:
            value = decode(r.value)
            fut = self.answers.get(value.get("request_id"))
            if fut is not None and not fut.done():
                fut.set_result(value)

    async def send_raw(self, request_id: str, raw: bytes, key: str) -> asyncio.Future[Json]:
        fut: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self.answers[request_id] = fut
        await self.producer.send_and_wait(self.t.session_input, raw, key=key.encode())
        return fut

    async def ask(self, op: str, body: Json, session_id: str | None = None,
                  timeout: float = 30) -> Json:
        rid = f"req-{uuid.uuid4().hex}"
        rec: Json = {**body, "op": op, "request_id": rid}
        if session_id is not None:
            rec["session_id"] = session_id
        fut = await self.send_raw(rid, encode(rec), session_id or rid)
        answer = await asyncio.wait_for(fut, timeout)
        assert answer["schema"] == records.INPUT_RESULT
        return answer

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        await stop_consumer(self.consumer)
        await self.producer.stop()


async def read_records(settings: Settings, topic: str, want: int = 1, timeout: float = 30,
                       until: Any = None, **client: Any) -> list[Json]:
    """The decoded records of ``topic`` from its start, until ``want`` of them (and, given
    ``until``, one for which it is true) have come or ``timeout`` passed — whatever came by
    then. ``client``: more AIOKafkaConsumer arguments (the ACL tests' TLS/SASL)."""
    c = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka_bootstrap_servers,
                         group_id=None, auto_offset_reset="earliest", **client)
    await c.start()
    got: list[Json] = []
    try:
        async with asyncio.timeout(timeout):
            while len(got) < want or (until is not None and not any(until(g) for g in got)):
                for recs in (await c.getmany(timeout_ms=300)).values():
                    got += [decode(r.value) for r in recs]
    except TimeoutError:
        pass
    finally:
        await c.stop()
    return got


async def read_topic(settings: Settings, topic: str) -> list[bytes]:
    """Every record on ``topic`` up to its current end (no consumer group)."""
    c = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers, group_id=None,
                         enable_auto_commit=False, max_partition_fetch_bytes=64 * 1024 * 1024)
    await c.start()
    try:
        tps = await assign_all(c, topic, at_end=False)
        ends = await c.end_offsets(tps)
        out: list[bytes] = []
        async with asyncio.timeout(30):
            while [tp for tp in tps if await c.position(tp) < ends[tp]]:
                got = await c.getmany(timeout_ms=500)
                for recs in got.values():
                    out.extend(r.value or b"" for r in recs)
        return out
    finally:
        await c.stop()


async def store_counts(settings: Settings) -> dict[str, int]:
    client: AsyncMongoClient[Json] = AsyncMongoClient(settings.mongodb_uri)
    try:
        db = client[settings.mongodb_database]
        # a record that decided nothing leaves a journal tombstone (``skip:…``, bookkeeping
        # that keeps the journal a prefix of the log: docs/storage.md), not a write of input
        return {c: await db[c].count_documents(
            {"_id": {"$not": {"$regex": "^skip:"}}} if c == "journal" else {})
            for c in COLLECTIONS}
    finally:
        await client.close()


async def open_call_by_fact(system: System, session_id: str, call_id: str,
                            name: str = "lookup") -> None:
    """The runtime's function call, as the fact storage turns into a ``function_call`` Item."""
    producer = AIOKafkaProducer(bootstrap_servers=system.settings.kafka_bootstrap_servers,
                                acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(system.topics.core_facts, encode({
            "schema": records.FACT, "fact_id": f"test:{session_id}:{call_id}",
            "session_id": session_id, "kind": "function_call", "call_id": call_id,
            "name": name, "arguments": {"q": 1}}), key=session_id.encode())
    finally:
        await producer.stop()
    await system.items.wait_for(session_id, lambda i: i["type"] == "function_call"
                                and i["call_id"] == call_id)

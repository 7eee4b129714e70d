"""Foundation: a record produced to the real broker is consumed by a running service that
writes documents to the real store, read back with PyMongo — and the same path fails, within a
bounded time, when the broker or the store is not there (Settings pointed at a closed port)."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from services.storage.app import StorageService
from shared.kafka import encode, ensure_topics
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.builders import admitted_create

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)

Json = dict[str, Any]


def closed_port() -> int:
    """A port nothing listens on (bound, read, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def produce(settings: Settings, topic: str, record: Json) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all",
                                enable_idempotence=True)
    await producer.start()
    try:
        await producer.send_and_wait(topic, encode(record), key=record["session_id"].encode())
    finally:
        await producer.stop()


async def wait_for_docs(settings: Settings, session_id: str, n_items: int,
                        timeout: float = 30) -> tuple[Json | None, list[Json]]:
    client: AsyncMongoClient[Json] = AsyncMongoClient(settings.mongodb_uri,
                                                      serverSelectionTimeoutMS=5_000)
    try:
        db = client[settings.mongodb_database]
        deadline = time.monotonic() + timeout
        while True:
            items = [d async for d in db.items.find({"session_id": session_id}).sort("sequence")]
            session = await db.sessions.find_one({"_id": session_id})
            if (session is not None and len(items) >= n_items) or time.monotonic() > deadline:
                return session, items
            await asyncio.sleep(0.1)
    finally:
        await client.close()


async def test_a_record_on_the_broker_becomes_documents_in_the_store(settings: Settings) -> None:
    topics = topics_for(settings)
    await ensure_topics(settings, topics)
    service = StorageService(settings)
    await service.start()
    try:
        rec = admitted_create("hello from the broker")
        await produce(settings, topics.session_admitted, rec)
        session, items = await wait_for_docs(settings, rec["session_id"], 2)
    finally:
        await service.stop()
    assert session is not None, "storage wrote no Session document"
    assert session["harness"] == "codex" and session["last_sequence"] == 2
    assert [(d["sequence"], d["type"]) for d in items] == [(1, "message"), (2, "turn")]
    assert '"text":"hello from the broker"' in items[0]["body"]


async def test_storage_cannot_start_without_the_broker(settings: Settings) -> None:
    """Kafka at a closed port: the service start raises instead of hanging or pretending."""
    broken = settings.model_copy(
        update={"kafka_bootstrap_servers": f"127.0.0.1:{closed_port()}"})
    service = StorageService(broken)
    t0 = time.monotonic()
    with pytest.raises(KafkaError) as info:
        async with asyncio.timeout(60):
            await service.start()
    assert not isinstance(info.value, TimeoutError), "start hung instead of failing"
    assert time.monotonic() - t0 < 60
    await service.client.close()


async def test_storage_cannot_start_or_write_without_the_store(settings: Settings) -> None:
    """The store at a closed port: start (index creation) and a write both fail with a PyMongo
    error within the server-selection timeout."""
    broken = settings.model_copy(update={"mongodb_uri": f"mongodb://127.0.0.1:{closed_port()}/"})
    service = StorageService(broken)
    try:
        t0 = time.monotonic()
        with pytest.raises(PyMongoError):
            async with asyncio.timeout(30):
                await service.start()
        assert time.monotonic() - t0 < 30
        t0 = time.monotonic()
        with pytest.raises(PyMongoError):
            async with asyncio.timeout(30):
                await service.handler.handle([admitted_create("never stored")])
        assert time.monotonic() - t0 < 30
    finally:
        await service.stop()


async def test_a_consumer_started_right_after_ensure_topics_meets_no_leaderless_partition(
        settings: Settings, caplog: pytest.LogCaptureFixture) -> None:
    """Services consume right after ``ensure_topics``: on partitions without a leader yet their
    offset fetches fail (``NotLeaderForPartitionError``, errors in every service's log at first
    start)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    topics = topics_for(settings)
    plan = await ensure_topics(settings, topics)
    assert plan.create, "the test needs fresh topics"
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        parts = [TopicPartition(d.name, n) for d in plan.create for n in range(d.partitions)]
        with caplog.at_level("WARNING", logger="aiokafka"):
            consumer.assign(parts)
            await consumer.seek_to_end(*parts)
            ends = [await consumer.position(tp) for tp in parts]
    finally:
        await consumer.stop()
    assert ends == [0] * len(parts)
    assert [r.getMessage() for r in caplog.records if "NotLeader" in r.getMessage()] == []


async def test_broker_ping_asks_for_no_topic_and_fails_on_a_closed_port(settings: Settings
                                                                       ) -> None:
    """Readiness and admission's broker watch probe the broker once a second. FastStream's
    ``ping`` asks for the metadata of every topic in the cluster (costly on a broker holding
    thousands); ``broker_ping`` asks for none — and still says False when nothing answers."""
    from aiokafka.protocol.metadata import MetadataRequest

    from shared.kafka import broker_ping, make_broker

    broker = make_broker(settings, "ping-test")
    await broker.start()
    try:
        admin = broker.config.admin_client
        asked: list[Any] = []
        send = admin._send_request

        async def spy(request: Any, node_id: int | None = None) -> Any:
            if isinstance(request, MetadataRequest):
                asked.append(request._topics)
            return await send(request, node_id)

        admin._send_request = spy  # type: ignore[method-assign]
        assert await broker_ping(broker) is True
        assert asked == [[]], f"metadata asked for {asked!r}, not for no topic"
    finally:
        await broker.stop()

    away = make_broker(settings.model_copy(
        update={"kafka_bootstrap_servers": f"127.0.0.1:{closed_port()}"}), "ping-away")
    t0 = time.monotonic()
    assert await broker_ping(away) is False
    assert time.monotonic() - t0 < 10

"""Why every consumer of Core holds a fetch at most ``shared.kafka.FETCH_MAX_WAIT_MS``, on the
real broker.

aiokafka leaves a partition whose fetched records are not all consumed yet out of the next fetch
request, and sends no second fetch to a broker while one is out. So when a consumer of two
partitions has taken only part of what it fetched from one of them, the next fetch asks for the
other alone; the broker holds it (nothing new there) for ``fetch_max_wait_ms``; and a record
appended meanwhile to the first partition waits until that fetch returns, although the consumer
has long drained its buffer. Storage reads three topics of several partitions each: at aiokafka's
default of 500 ms, one such wait at the start of a burst of verdicts put it 0.4 s behind for the
rest of the burst (docs/storage.md, "Fetch wait")."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from shared.coreservice import CoreService
from shared.kafka import FETCH_MAX_WAIT_MS
from shared.settings import Settings

pytestmark = pytest.mark.integration
PREFETCH_BACKOFF_S = 0.1  # aiokafka's prefetch_backoff: how long fetched records hold a fetch


async def _new_topic(bootstrap: str) -> str:
    name = f"fetchwait-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=1)])
    finally:
        await admin.close()
    return name


async def _late_record(bootstrap: str, topic: str, fetch_max_wait_ms: int) -> float:
    """Seconds from appending a record to partition 0 until the consumer has it, after the
    consumer took only part of what it had fetched from partition 0 (so the fetch out asks for
    partition 1 alone) and then drained the rest."""
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, fetch_max_wait_ms=fetch_max_wait_ms)
    await producer.start()
    await consumer.start()
    try:
        for tp in (p0, p1):  # the partitions have their leader
            await producer.send_and_wait(topic, b"warm", partition=tp.partition)
        first = (await producer.send_and_wait(topic, b"first 0", partition=0)).offset
        for n in range(1, 10):
            await producer.send_and_wait(topic, f"first {n}".encode(), partition=0)
        consumer.assign([p0, p1])
        consumer.seek(p0, first)
        await consumer.seek_to_end(p1)
        await consumer.position(p1)
        got: list[Any] = []
        while not got:  # one record of the ten fetched: nine stay in the consumer's buffer
            got = (await consumer.getmany(p0, timeout_ms=2_000, max_records=1)).get(p0, [])
        await asyncio.sleep(PREFETCH_BACKOFF_S * 1.5)  # the next fetch goes out: partition 1 only
        rest = 0
        while rest < 9:  # the buffer drained
            rest += len((await consumer.getmany(p0, timeout_ms=2_000)).get(p0, []))
        t0 = time.monotonic()
        await producer.send_and_wait(topic, b"late", partition=0)
        while True:
            batch = await consumer.getmany(p0, timeout_ms=2_000)
            if any(r.value == b"late" for r in batch.get(p0, [])):
                return time.monotonic() - t0
    finally:
        await consumer.stop()
        await producer.stop()


async def test_a_record_waits_out_the_fetch_held_for_another_partition(settings: Settings
                                                                       ) -> None:
    topic = await _new_topic(settings.kafka_bootstrap_servers)
    # aiokafka's default: the record waits for most of the 500 ms hold
    assert await _late_record(settings.kafka_bootstrap_servers, topic, 500) > 0.25
    # Core's: at most the shorter hold (and the broker's round trips)
    assert await _late_record(settings.kafka_bootstrap_servers, topic, FETCH_MAX_WAIT_MS) < 0.25


async def test_every_core_subscriber_holds_a_fetch_at_most_fetch_max_wait(settings: Settings
                                                                           ) -> None:
    """The four services subscribe through ``CoreService.subscriber`` (one place)."""
    seen: dict[str, Any] = {}
    svc = CoreService(settings, "test-fetch-wait", "storage")
    try:
        real = svc.broker.subscriber

        def spy(*topics: str, **kwargs: Any) -> Any:
            seen.update(kwargs)
            return real(*topics, **kwargs)

        svc.broker.subscriber = spy  # type: ignore[method-assign]
        svc.subscriber("some.topic", group="g", batch=True)
        assert seen["fetch_max_wait_ms"] == FETCH_MAX_WAIT_MS <= 50
    finally:
        await svc.client.close()

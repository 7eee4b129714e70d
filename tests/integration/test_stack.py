"""The real infrastructure answers: a record makes the round trip through the broker, a document
through the MongoDB-wire store, and — with the component taken away — both fail instead of
pretending (``faults``: the local stack stops Kafka / FerretDB and starts them again)."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from shared.settings import Settings
from tests.support.skips import unavailable
from tests.support.stack import REPO, STACK_CLI, Stack

pytestmark = pytest.mark.integration

KAFKA_TIMEOUT_MS = 5_000
STORE_TIMEOUT_MS = 3_000


async def produce_and_consume(settings: Settings, topic: str, key: bytes, value: bytes) -> tuple[
        bytes | None, bytes | None]:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all",
                                enable_idempotence=True, request_timeout_ms=KAFKA_TIMEOUT_MS)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()
    assert meta.offset >= 0
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=settings.kafka_bootstrap_servers,
                                group_id=f"{settings.topic_prefix}stack-check",
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                request_timeout_ms=KAFKA_TIMEOUT_MS + 5_000)
    await consumer.start()
    try:
        async with asyncio.timeout(30):
            record = await consumer.getone()
        await consumer.commit()
    finally:
        await consumer.stop()
    return record.key, record.value


async def insert_and_find(settings: Settings, doc: dict[str, object]) -> dict[str, object] | None:
    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        settings.mongodb_uri, serverSelectionTimeoutMS=STORE_TIMEOUT_MS)
    try:
        coll = client[settings.mongodb_database]["stack_check"]
        await coll.insert_one(dict(doc))
        found = await coll.find_one({"_id": doc["_id"]})
        await client.drop_database(settings.mongodb_database)
        return found
    finally:
        await client.close()


async def test_a_record_makes_the_round_trip_through_the_real_broker(settings: Settings) -> None:
    topic = f"{settings.topic_prefix}stack.check"
    value = uuid.uuid4().hex.encode()
    key, got = await produce_and_consume(settings, topic, b"k1", value)
    assert (key, got) == (b"k1", value)


async def test_a_document_makes_the_round_trip_through_the_real_store(settings: Settings) -> None:
    doc: dict[str, object] = {"_id": uuid.uuid4().hex, "text": " \n\t", "parts": [1, "two"]}
    assert await insert_and_find(settings, doc) == doc


def test_settings_are_isolated_per_test(settings: Settings, stack: Stack) -> None:
    assert settings.kafka_bootstrap_servers == stack.bootstrap
    assert settings.mongodb_uri == stack.mongodb_uri
    assert settings.topic_prefix.startswith("t") and settings.topic_prefix.endswith(".")
    assert settings.mongodb_database == settings.topic_prefix[:-1]
    assert settings.http_host == "127.0.0.1" and settings.http_port not in (0, 8080)


def test_launcher_reports_the_local_stack_ready(stack: Stack) -> None:
    if stack.state_dir is None:
        unavailable(f"{stack.kind} stack: not started by deploy.local.stack")
    proc = subprocess.run(
        [*STACK_CLI, "status", "--state-dir", str(stack.state_dir),
         "--kafka-port", str(stack.kafka_port), "--mongo-port", str(stack.mongo_port)],
        capture_output=True, text=True, check=False, timeout=60, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    for name in ("kafka", "ferretdb"):
        assert "running" in lines[name] and " ready" in lines[name], proc.stdout


@pytest.mark.faults
async def test_kafka_round_trip_fails_while_the_broker_is_down(stack: Stack,
                                                               settings: Settings) -> None:
    stack.stop("kafka")
    try:
        with pytest.raises(KafkaError):
            await produce_and_consume(settings, f"{settings.topic_prefix}down", b"k", b"v")
    finally:
        stack.start("kafka")
    # Ready (it answers Metadata) is not yet able to create a topic: a restarted broker is
    # fenced until it has caught up with the metadata log (a CI run met UnknownTopicOrPartition
    # for 5 s, 2026-12-01). Back within a minute is what the test asks.
    deadline = time.monotonic() + 60
    while True:
        try:
            key, got = await produce_and_consume(settings, f"{settings.topic_prefix}up", b"k",
                                                 b"v")
            break
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1)
    assert (key, got) == (b"k", b"v")


@pytest.mark.faults
async def test_store_round_trip_fails_while_the_store_is_down(stack: Stack,
                                                              settings: Settings) -> None:
    stack.stop("ferretdb")
    try:
        with pytest.raises(PyMongoError):
            await insert_and_find(settings, {"_id": "down"})
    finally:
        stack.start("ferretdb")
    assert await insert_and_find(settings, {"_id": "up"}) == {"_id": "up"}

"""A produce batch holds what one storage batch hands over (``shared.kafka.PRODUCER_BATCH_BYTES``):
aiokafka keeps one produce request in flight per broker, and ``send`` waits once a partition's
next batch is full — so a batch's Items must fit in it, or they wait for round trips. The fair
baseline's producer takes the same limit (issue 18: same batch limits on both sides)."""

from __future__ import annotations

import importlib

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from services.admission.app import AdmissionService
from services.storage.app import StorageService
from shared.kafka import (
    HANDOVER_LINGER_MS,
    PRODUCER_BATCH_BYTES,
    make_producer,
    max_record_bytes,
)
from shared.settings import Settings

SETTINGS = Settings(kafka_bootstrap_servers="127.0.0.1:1", mongodb_uri="mongodb://127.0.0.1:1/")
ITEM = b"x" * 400  # a verdict's Item record is ~385 B


async def queued_before_a_wait(producer: AIOKafkaProducer, n: int) -> int:
    """How many records of ``n`` a partition's batch takes while no request can go out (the
    producer is not started: nothing drains it) before ``send`` would wait."""
    acc = producer._message_accumulator
    tp = TopicPartition("t", 0)
    for i in range(n):
        try:
            await acc.add_message(tp, b"session_1", ITEM, timeout=0.01)
        except KafkaTimeoutError:
            return i
    return n


async def test_a_storage_batch_of_items_never_waits_for_a_produce_round_trip() -> None:
    # every Item of the largest batch on one partition (the worst case of the key spread)
    n = SETTINGS.storage_batch_max
    assert await queued_before_a_wait(make_producer(SETTINGS, "t"), n) == n


async def test_aiokafkas_default_batch_would_make_it_wait() -> None:
    """The check above can fail: with aiokafka's 16 KiB default, ~40 Items fill the batch."""
    default = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")
    assert await queued_before_a_wait(default, SETTINGS.storage_batch_max) < 50


def test_a_full_batch_fits_every_topic() -> None:
    # topics are created with max.message.bytes = max_record_bytes (shared.topics)
    for body in (1, 1024, SETTINGS.max_body_bytes):
        assert PRODUCER_BATCH_BYTES < max_record_bytes(SETTINGS.model_copy(
            update={"max_body_bytes": body}))


@pytest.mark.parametrize("attr", ["_batch_size", "_linger_time"])
async def test_the_fair_baseline_batches_as_the_product_does(
        attr: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # read when it is imported
    baseline_pipeline = importlib.import_module("bench.baseline_pipeline")
    # the HTTP side as admission's producer, the store side as storage's
    admission = AdmissionService(SETTINGS)
    storage = StorageService(SETTINGS)
    try:
        for product, baseline in (
                (admission.producer, baseline_pipeline.make_producer()),
                (storage.producer, baseline_pipeline.make_producer(HANDOVER_LINGER_MS))):
            assert getattr(baseline._message_accumulator, attr) == getattr(
                product._message_accumulator, attr)
    finally:
        await admission.client.close()
        await storage.client.close()


async def test_storage_hands_a_batch_over_without_a_linger() -> None:
    """Storage queues a batch's records before the sender runs, then awaits their acks: a
    linger would only hold that request back (``shared.kafka.HANDOVER_LINGER_MS``)."""
    storage = StorageService(SETTINGS)
    try:
        assert HANDOVER_LINGER_MS == 0
        assert storage.producer._message_accumulator._linger_time == 0
    finally:
        await storage.client.close()

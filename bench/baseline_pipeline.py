"""The pipeline baseline: the same hops as the product with none of its logic, written plainly
with the same libraries, in one process like ``bench.serve_product``.

``python -m bench.baseline_pipeline pipeline`` —
  HTTP (FastAPI on uvicorn): ``POST /v1/sessions/{id}/events`` parses the JSON body, produces
  it to ``<prefix>in`` with acks=all (aiokafka) and **waits for the consumer's reply** before it
  answers 202 — as the product's 202 means "stored" (admission waits for storage's answer on
  ``storage.replies``);
  a consumer (aiokafka, consumer group, getmany with the product's batch limits: at most
  ``storage_batch_max`` records, 20 ms) inserts each batch into the store (PyMongo async
  ``insert_many``), produces one Item per record to ``<prefix>items`` and one reply per record to
  ``<prefix>replies`` with acks=all, then commits;
  a reply tail (no group, every partition, from the end — as admission's ``ReplyTail``) resolves
  the waiting request. Producers as the product's (``shared.kafka``: acks=all, idempotent,
  batches of ``PRODUCER_BATCH_BYTES``): the HTTP side's lingers 2 ms as admission's, the store
  side's ``HANDOVER_LINGER_MS`` as storage's (the relay's too); two producers, one consumer,
  one tail — the product's counts.
``python -m bench.baseline_pipeline relay`` — the raw relay (the ceiling, information only):
  consume ``<prefix>in``, produce the value unchanged to ``<prefix>items``; no HTTP, no store.

Environment: ``KAFKA_BOOTSTRAP_SERVERS``, ``MONGODB_URI``, ``SESSION_CORE_TOPIC_PREFIX``,
``SESSION_CORE_MONGODB_DATABASE``, ``SESSION_CORE_HTTP_PORT``. Prints ``READY``."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import uuid
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

import uvicorn
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from fastapi import FastAPI, Request, Response
from pymongo import AsyncMongoClient

from shared import eventloop
from shared.kafka import HANDOVER_LINGER_MS, PRODUCER_BATCH_BYTES, KeyPartitioner

BOOTSTRAP = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
PREFIX = os.environ.get("SESSION_CORE_TOPIC_PREFIX", "baseline.")
IN_TOPIC, ITEMS_TOPIC, REPLIES_TOPIC = f"{PREFIX}in", f"{PREFIX}items", f"{PREFIX}replies"
PARTITIONS = 6  # as the product's topics
BATCH_MAX = int(os.environ.get("SESSION_CORE_STORAGE_BATCH_MAX", "500"))  # storage_batch_max
BATCH_TIMEOUT_MS = 20  # storage's batch_timeout_ms
REPLY_TIMEOUT_S = 10.0  # storage_reply_timeout_ms
WAITING: dict[str, asyncio.Future[None]] = {}
READY_TAIL = asyncio.Event()


async def create_topics() -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
               for t in (IN_TOPIC, ITEMS_TOPIC, REPLIES_TOPIC) if t not in existing]
        if new:
            with suppress(TopicAlreadyExistsError):
                await admin.create_topics(new)
    finally:
        await admin.close()


def make_producer(linger_ms: int = 2) -> AIOKafkaProducer:
    """The product's producer settings (``shared.kafka.make_producer``), partitioner included:
    the HTTP side lingers as admission's producer (the default, 2 ms), the store side as
    storage's (``HANDOVER_LINGER_MS``)."""
    return AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", enable_idempotence=True,
                            linger_ms=linger_ms, max_batch_size=PRODUCER_BATCH_BYTES,
                            partitioner=KeyPartitioner())


def make_consumer(group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(IN_TOPIC, bootstrap_servers=BOOTSTRAP, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False)


def build_app(producer: AIOKafkaProducer) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/sessions/{session_id}/events", status_code=202)
    async def add_event(session_id: str, request: Request) -> Response:
        body = json.loads(await request.body())
        record = {"session_id": session_id, "event_id": uuid.uuid4().hex,
                  "request_id": uuid.uuid4().hex, "body": body}
        stored: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        WAITING[record["request_id"]] = stored
        try:
            await producer.send_and_wait(IN_TOPIC, json.dumps(record).encode(),
                                         key=session_id.encode())
            await asyncio.wait_for(stored, REPLY_TIMEOUT_S)
        except TimeoutError:
            return Response('{"error": "timeout"}', status_code=504,
                            media_type="application/json")
        finally:
            WAITING.pop(record["request_id"], None)
        return Response(json.dumps({"event_id": record["event_id"]}), status_code=202,
                        media_type="application/json")

    return app


async def store_and_publish(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer,
                            db: Any) -> None:
    while True:
        batches = await consumer.getmany(timeout_ms=BATCH_TIMEOUT_MS, max_records=BATCH_MAX)
        records = [r for rs in batches.values() for r in rs]
        if not records:
            continue
        now = datetime.now(UTC).isoformat()
        docs, items, replies = [], [], []
        for r in records:
            rec = json.loads(r.value)
            item = {"id": f"item_{uuid.uuid4().hex}", "session_id": rec["session_id"],
                    "type": "message", "created_at": now,
                    "content": rec["body"]["input"][0]["content"]}
            docs.append({"_id": item["id"], "session_id": rec["session_id"],
                         "body": json.dumps(item)})
            items.append(item)
            replies.append({"request_id": rec["request_id"], "status": 202,
                            "body": {"event_id": rec["event_id"], "items": [item]}})
        await db.items.insert_many(docs, ordered=False)
        sent = [await producer.send(ITEMS_TOPIC, json.dumps(it).encode(),
                                    key=it["session_id"].encode()) for it in items]
        await asyncio.gather(*sent)
        answers = [await producer.send(REPLIES_TOPIC, json.dumps(r).encode(),
                                       key=r["request_id"].encode()) for r in replies]
        await asyncio.gather(*answers)
        await consumer.commit()


async def reply_tail() -> None:
    """Every partition of the replies topic from its end (no group), resolving waiters."""
    c = AIOKafkaConsumer(bootstrap_servers=BOOTSTRAP, group_id=None, enable_auto_commit=False,
                         fetch_max_wait_ms=50)
    await c.start()
    try:
        parts: Any = None
        for _ in range(100):
            parts = c.partitions_for_topic(REPLIES_TOPIC)
            if parts:
                break
            await c._client.force_metadata_update()
            await asyncio.sleep(0.1)
        tps = [TopicPartition(REPLIES_TOPIC, p) for p in sorted(parts or ())]
        c.assign(tps)
        await c.seek_to_end(*tps)
        for tp in tps:
            await c.position(tp)
        READY_TAIL.set()
        while True:
            for rs in (await c.getmany(timeout_ms=100)).values():
                for r in rs:
                    fut = WAITING.pop(json.loads(r.value)["request_id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(None)
    finally:
        await c.stop()


async def relay(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
    while True:
        batches = await consumer.getmany(timeout_ms=BATCH_TIMEOUT_MS, max_records=BATCH_MAX)
        sent = [await producer.send(ITEMS_TOPIC, r.value, key=r.key)
                for rs in batches.values() for r in rs]
        if sent:
            await asyncio.gather(*sent)
            await consumer.commit()


async def main(mode: str) -> None:
    await create_topics()
    producer = make_producer()  # the HTTP side's, as admission's
    await producer.start()
    handover = make_producer(HANDOVER_LINGER_MS)  # the store side's, as storage's
    await handover.start()
    consumer = make_consumer(f"{PREFIX}{mode}")
    await consumer.start()
    client: AsyncMongoClient[dict[str, Any]] | None = None
    server: uvicorn.Server | None = None
    tasks: list[asyncio.Task[Any]] = []
    if mode == "pipeline":
        client = AsyncMongoClient(os.environ["MONGODB_URI"])
        db = client[os.environ.get("SESSION_CORE_MONGODB_DATABASE", "baseline")]
        await db.command("ping")
        tasks.append(asyncio.create_task(store_and_publish(consumer, handover, db)))
        tasks.append(asyncio.create_task(reply_tail()))
        await READY_TAIL.wait()
        config = uvicorn.Config(build_app(producer), host="127.0.0.1",
                                port=int(os.environ["SESSION_CORE_HTTP_PORT"]),
                                log_config=None, access_log=False, lifespan="off")
        server = uvicorn.Server(config)
        tasks.append(asyncio.create_task(server.serve()))
        while not server.started:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    else:
        tasks.append(asyncio.create_task(relay(consumer, handover)))
    print("READY", flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    if server is not None:
        server.should_exit = True
    for t in tasks:
        if t is not tasks[-1] or server is None:
            t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await consumer.stop()
    await producer.stop()
    await handover.stop()
    if client is not None:
        await client.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("pipeline", "relay"))
    eventloop.run(main(ap.parse_args().mode))  # the product's loop (shared/eventloop.py)

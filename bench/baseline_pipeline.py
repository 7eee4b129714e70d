"""The pipeline baseline: the same hops as the product with none of its logic, written plainly
with the same libraries, in one process like ``bench.serve_product``.

``python -m bench.baseline_pipeline pipeline`` —
  HTTP (FastAPI on uvicorn): ``POST /v1/sessions/{id}/events`` parses the JSON body and produces
  it to ``<prefix>in`` with acks=all (aiokafka), answers 202;
  a consumer (aiokafka, consumer group, getmany) inserts each batch into the store
  (PyMongo async ``insert_many``), produces one Item per record to ``<prefix>items`` with
  acks=all, then commits.
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
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from fastapi import FastAPI, Request, Response
from pymongo import AsyncMongoClient

BOOTSTRAP = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
PREFIX = os.environ.get("SESSION_CORE_TOPIC_PREFIX", "baseline.")
IN_TOPIC, ITEMS_TOPIC = f"{PREFIX}in", f"{PREFIX}items"
PARTITIONS = 6  # as the product's topics


async def create_topics() -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=BOOTSTRAP)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        new = [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
               for t in (IN_TOPIC, ITEMS_TOPIC) if t not in existing]
        if new:
            with suppress(TopicAlreadyExistsError):
                await admin.create_topics(new)
    finally:
        await admin.close()


def make_producer() -> AIOKafkaProducer:
    return AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, acks="all", enable_idempotence=True,
                            linger_ms=2)


def make_consumer(group: str) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(IN_TOPIC, bootstrap_servers=BOOTSTRAP, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False)


def build_app(producer: AIOKafkaProducer) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/sessions/{session_id}/events", status_code=202)
    async def add_event(session_id: str, request: Request) -> Response:
        body = json.loads(await request.body())
        record = {"session_id": session_id, "event_id": uuid.uuid4().hex, "body": body}
        await producer.send_and_wait(IN_TOPIC, json.dumps(record).encode(),
                                     key=session_id.encode())
        return Response(json.dumps({"event_id": record["event_id"]}), status_code=202,
                        media_type="application/json")

    return app


async def store_and_publish(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer,
                            db: Any) -> None:
    while True:
        batches = await consumer.getmany(timeout_ms=100, max_records=500)
        records = [r for rs in batches.values() for r in rs]
        if not records:
            continue
        now = datetime.now(UTC).isoformat()
        docs, items = [], []
        for r in records:
            rec = json.loads(r.value)
            item = {"id": f"item_{uuid.uuid4().hex}", "session_id": rec["session_id"],
                    "type": "message", "created_at": now,
                    "content": rec["body"]["input"][0]["content"]}
            docs.append({"_id": item["id"], "session_id": rec["session_id"],
                         "body": json.dumps(item)})
            items.append(item)
        await db.items.insert_many(docs, ordered=False)
        sent = [await producer.send(ITEMS_TOPIC, json.dumps(it).encode(),
                                    key=it["session_id"].encode()) for it in items]
        await asyncio.gather(*sent)
        await consumer.commit()


async def relay(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer) -> None:
    while True:
        batches = await consumer.getmany(timeout_ms=100, max_records=500)
        sent = [await producer.send(ITEMS_TOPIC, r.value, key=r.key)
                for rs in batches.values() for r in rs]
        if sent:
            await asyncio.gather(*sent)
            await consumer.commit()


async def main(mode: str) -> None:
    await create_topics()
    producer = make_producer()
    await producer.start()
    consumer = make_consumer(f"{PREFIX}{mode}")
    await consumer.start()
    client: AsyncMongoClient[dict[str, Any]] | None = None
    server: uvicorn.Server | None = None
    tasks: list[asyncio.Task[Any]] = []
    if mode == "pipeline":
        client = AsyncMongoClient(os.environ["MONGODB_URI"])
        db = client[os.environ.get("SESSION_CORE_MONGODB_DATABASE", "baseline")]
        await db.command("ping")
        tasks.append(asyncio.create_task(store_and_publish(consumer, producer, db)))
        config = uvicorn.Config(build_app(producer), host="127.0.0.1",
                                port=int(os.environ["SESSION_CORE_HTTP_PORT"]),
                                log_config=None, access_log=False, lifespan="off")
        server = uvicorn.Server(config)
        tasks.append(asyncio.create_task(server.serve()))
        while not server.started:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    else:
        tasks.append(asyncio.create_task(relay(consumer, producer)))
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
    if client is not None:
        await client.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("pipeline", "relay"))
    asyncio.run(main(ap.parse_args().mode))

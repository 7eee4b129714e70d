"""A producer over Kafka: publish to ``session.input`` and await the answer on
``session.input.results`` by request id (the same status and body as the HTTP API).

Needs the client distribution with its Kafka extra (aiokafka):

    pip install './packaging/client[kafka]'   # session-core-client[kafka], from a checkout
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/producer_kafka.py
"""

from __future__ import annotations

import asyncio
import os

from session_core_client.kafka import KafkaProducerClient


async def main() -> int:
    async with KafkaProducerClient(os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
                                   topic_prefix=os.environ.get("SESSION_CORE_TOPIC_PREFIX", ""),
                                   tenant=os.environ.get("SESSION_CORE_TENANT")) as kafka:
        created = await kafka.create("codex", "hello over Kafka")
        print(f"sessions.create → {created['status']}: {created['body'].get('id')}")
        if created["status"] != 201:
            return 1
        sid = created["body"]["id"]
        sent = await kafka.message(sid, "and a second message")
        print(f"events.create → {sent['status']}: delivery={sent['body'].get('delivery')}")
        refused = await kafka.message(sid, [])
        print(f"an empty input → {refused['status']} {refused['body']['error']['type']} "
              f"(param {refused['body']['error']['param']})")
        return 0 if sent["status"] == 202 and refused["status"] == 400 else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))

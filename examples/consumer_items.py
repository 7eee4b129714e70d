"""An Item-topic consumer: reads ``session.items`` in a consumer group, de-duplicates by Item id
(delivery is at least once: a record can come twice after a rebalance or a producer retry), and
checks the per-Session order (``sequence`` 1, 2, 3… with no gap).

Needs aiokafka only (no Session Core package):

    pip install 'aiokafka>=0.12'
    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 python examples/consumer_items.py SESSION_ID [N]

Prints each new Item of the Session and stops after N Items (default: run until Ctrl-C).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid

from aiokafka import AIOKafkaConsumer


async def main(session_id: str, want: int | None) -> int:
    topic = os.environ.get("SESSION_CORE_TOPIC_PREFIX", "") + "session.items"
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        group_id=os.environ.get("CONSUMER_GROUP", f"example-{uuid.uuid4().hex}"),
        auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    seen: set[str] = set()
    last = 0
    try:
        async for rec in consumer:
            item = json.loads(rec.value)
            if item.get("session_id") != session_id:
                continue
            if item["id"] in seen:  # a redelivery: already handled
                continue
            if item["sequence"] != last + 1:
                print(f"gap: expected {last + 1}, got {item['sequence']}", file=sys.stderr)
                return 1
            seen.add(item["id"])
            last = item["sequence"]
            print(f"{item['sequence']:>3} {item['type']} {item.get('state') or ''}".rstrip(),
                  flush=True)
            await consumer.commit()  # after the Item is handled: at least once
            if want is not None and last >= want:
                return 0
    finally:
        await consumer.stop()
    return 0


if __name__ == "__main__":
    n = int(sys.argv[2]) if len(sys.argv) > 2 else None
    raise SystemExit(asyncio.run(main(sys.argv[1], n)))

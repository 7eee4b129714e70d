"""Why storage's writes take turns (docs/storage.md, "Writes take turns"): ``insert_many`` of 40
documents every 10 ms, alone, beside two tasks upserting 40 Sessions per command, and the same
with every write command taking turns on one ``asyncio.Lock`` (what ``StorageRepository.turn``
does). A diagnostic, not a benchmark figure; needs a store:

    MONGODB_URI=mongodb://127.0.0.1:27017/ python bench/store_write_turns.py [alone|turns|...]
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from typing import Any

from pymongo import AsyncMongoClient, UpdateOne

INSERTS, PER_COMMAND = 300, 40


async def run(uri: str, mode: str) -> str:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    db = client[f"turns_{uuid.uuid4().hex[:8]}"]
    try:
        await db.items.insert_many([{"_id": f"pre{i}", "pad": "p" * 400} for i in range(20_000)])
        await db.sessions.insert_many([{"_id": f"s{i}", "v": 0} for i in range(20_000)])
        await asyncio.sleep(1.0)  # the local store's _id index sweep
        # every write command in turn, or each as it comes
        turn: Any = asyncio.Lock() if mode == "turns" else contextlib.nullcontext()
        stop = asyncio.Event()
        upserts: list[float] = []

        async def sessions() -> None:
            k = 0
            while not stop.is_set():
                k += 1
                ops = [UpdateOne({"_id": f"s{(k * PER_COMMAND + i) * 7919 % 20_000}"},
                                 {"$set": {"v": k, "pad": "r" * 300}}, upsert=True)
                       for i in range(PER_COMMAND)]
                t0 = time.perf_counter()
                async with turn:
                    await db.sessions.bulk_write(ops, ordered=False)
                upserts.append(time.perf_counter() - t0)
                await asyncio.sleep(0.005)

        others = [asyncio.create_task(sessions()) for _ in range(2 if mode != "alone" else 0)]
        lat = []
        for n in range(INSERTS):
            docs = [{"_id": f"i{n}_{i}_{uuid.uuid4().hex[:6]}", "pad": "p" * 400}
                    for i in range(PER_COMMAND)]
            t0 = time.perf_counter()
            async with turn:
                await db.items.insert_many(docs, ordered=True)
            lat.append((time.perf_counter() - t0) * 1e3)
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.gather(*others)
        lat.sort()
        q = statistics.quantiles(lat, n=100)
        return (f"{mode:10s} insert_many({PER_COMMAND}): p50 {q[49]:.1f} p99 {q[98]:.1f} "
                f"max {lat[-1]:.1f} ms; upsert commands {len(upserts)}")
    finally:
        await client.drop_database(db.name)
        await client.close()


def main() -> None:
    uri = os.environ.get("MONGODB_URI")
    if not uri:
        sys.exit("MONGODB_URI is not set (start a stack: make run)")
    for mode in sys.argv[1:] or ["alone", "concurrent", "turns"]:
        print(asyncio.run(run(uri, mode)), flush=True)


if __name__ == "__main__":
    main()

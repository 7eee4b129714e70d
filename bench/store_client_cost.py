"""What one store operation costs the product's own process: PyMongo's async client (the one
the services use) against FerretDB on a private local stack, one operation at a time, as a
batch's look-ups and inserts are awaited. Client CPU (``time.process_time``) and wall time per
operation, and the sync client beside it:

    PYTHONPATH=$PWD .venv/bin/python -m bench.store_client_cost [--ops 300]

A diagnostic behind docs/decisions.md, "Store look-ups through PyMongo's collection API", not
a figure with a target: each look-up of a Session not in memory costs the product this much CPU
besides the store's own work."""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from pymongo import AsyncMongoClient, MongoClient

from bench.common import infrastructure


def docs(n: int) -> list[dict[str, Any]]:
    """``n`` Item-like documents (a short text message each)."""
    return [{"_id": uuid.uuid4().hex, "session_id": "s", "type": "message", "sequence": i,
             "content": [{"type": "input_text", "text": "hello world " * 10}],
             "created_at": "2026-12-03T00:00:00Z"} for i in range(n)]


def insert(coll: Any, n: int) -> Any:
    return coll.insert_many(docs(n))


def line(what: str, ops: int, wall: float, cpu: float) -> str:
    return f"{what:34s} wall {1000 * wall / ops:6.2f} ms, client cpu {1000 * cpu / ops:5.2f} ms"


async def timed_async(ops: int, op: Callable[[], Awaitable[Any]]) -> tuple[float, float]:
    for _ in range(20):  # connections and code paths warm
        await op()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(ops):
        await op()
    return time.perf_counter() - t0, time.process_time() - c0


def timed_sync(ops: int, op: Callable[[], Any]) -> tuple[float, float]:
    for _ in range(20):
        op()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(ops):
        op()
    return time.perf_counter() - t0, time.process_time() - c0


async def run_async(uri: str, ops: int) -> list[str]:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    coll = client[f"cost{uuid.uuid4().hex[:8]}"]["items"]
    await coll.insert_one({"_id": "here"})
    out = [line("async find_one (by _id)", ops,
                *await timed_async(ops, lambda: coll.find_one({"_id": "here"})))]
    for n in (1, 8, 64):
        out.append(line(f"async insert_many of {n}", ops,
                        *await timed_async(ops, functools.partial(insert, coll, n))))
    await client.close()
    return out


def run_sync(uri: str, ops: int) -> list[str]:
    client: MongoClient[dict[str, Any]] = MongoClient(uri)
    coll = client[f"cost{uuid.uuid4().hex[:8]}"]["items"]
    coll.insert_one({"_id": "here"})
    out = [line("sync find_one (by _id)", ops,
                *timed_sync(ops, lambda: coll.find_one({"_id": "here"})))]
    for n in (1, 8, 64):
        out.append(line(f"sync insert_many of {n}", ops,
                        *timed_sync(ops, functools.partial(insert, coll, n))))
    client.close()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--ops", type=int, default=300, help="operations per row")
    args = ap.parse_args(argv)
    with infrastructure() as infra:
        rows = asyncio.run(run_async(infra.mongodb_uri, args.ops))
        rows += run_sync(infra.mongodb_uri, args.ops)
    print("\n".join(rows))


if __name__ == "__main__":
    main()

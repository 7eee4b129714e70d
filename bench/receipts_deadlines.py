"""Receipt deadlines at scale (issue 6, "Scale"): one real ``ReceiptService`` on the real stack
holding 10 000 pending calls. Prints one JSON result dict.

    python bench/receipts_deadlines.py [--calls 10000] [--window 10] [--spread 5] [--sessions 1000]

How:
* The stack comes from ``KAFKA_BOOTSTRAP_SERVERS`` + ``MONGODB_URI``, else a private local stack
  (``deploy/local/stack.py up`` on free ports, ``down`` at the end). Topics and database are the
  run's own.
* The store gets a Session (claude_code) and an announced call per pending call, as storage
  would have written them, so the tracker's look-ups are the real ones.
* Warm-up: 500 deliveries stamped already overdue are opened and turn ``uncertain`` at once
  (allocator, client buffers and code paths warm).
* A child process publishes ``--calls`` ``function_result`` deliveries to ``runtime.deliveries``
  at a steady rate over ``--spread`` seconds (a steady state of calls/window per second would
  hold the same number pending). The child's memory is not the tracker's.
* RSS of this process (the tracker) before and after all calls are open, divided by the calls:
  ``rss_per_call_bytes``; ``retained_per_call_bytes`` is the deep size of the tracker's own
  per-call structures (records, heap, indexes), a noise-free cross-check.
* Lateness = when the ``uncertain`` verdict left minus the deadline (the delivery's Kafka
  timestamp + window): ``tracker_*`` from ``svc.lateness`` (measured by the tracker once the
  verdict is published), ``kafka_*`` from the verdict record's own Kafka timestamp on
  ``core.facts``, read by an independent consumer.
Targets (issue 6): p99 ≤ 100 ms, ≤ 2 KB per pending call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402

from services.receipts.app import ReceiptService  # noqa: E402
from shared.kafka import decode, encode, ensure_topics  # noqa: E402
from shared.logging import configure_logging  # noqa: E402
from shared.settings import Settings  # noqa: E402
from shared.topics import topics_for  # noqa: E402

WARMUP = 500
SELF = str(Path(__file__).resolve())
PAGE = resource.getpagesize()


def progress(msg: str) -> None:
    sys.stderr.write(f"[receipts-bench] {msg}\n")
    sys.stderr.flush()


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def infrastructure() -> Iterator[tuple[str, str, str]]:
    kafka, mongo = os.environ.get("KAFKA_BOOTSTRAP_SERVERS"), os.environ.get("MONGODB_URI")
    if kafka and mongo:
        yield kafka, mongo, "external"
        return
    state = tempfile.mkdtemp(prefix="receipts-bench-")
    kp, mp, cp = free_port(), free_port(), free_port()
    args = ["--state-dir", state, "--kafka-port", str(kp), "--mongo-port", str(mp),
            "--kafka-controller-port", str(cp)]
    stack = [sys.executable, str(REPO / "deploy" / "local" / "stack.py")]
    progress(f"starting a private stack in {state}")
    try:
        subprocess.run([*stack, "up", *args], check=True, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300)
        yield f"127.0.0.1:{kp}", f"mongodb://127.0.0.1:{mp}/", "local"
    finally:
        subprocess.run([*stack, "down", *args], check=False, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=120)


def ids(i: int, sessions: int) -> tuple[str, str]:
    return f"session_{i % sessions:032x}", f"toolu_{i:08d}"


def delivery(i: int, sessions: int, tag: str) -> dict[str, Any]:
    sid, cid = ids(i, sessions)
    return {"schema": "runtime.delivery/1", "delivery_id": f"dlv_{tag}{i:08d}",
            "runtime_id": "rt_bench", "session_id": sid, "turn_id": "turn_bench",
            "kind": "function_result", "call_id": cid, "name": "lookup", "success": True,
            "content": [{"type": "input_text", "text": f"result {i}: " + "x" * 64}]}


# ---- the child process: the deliveries -------------------------------------------------------

async def produce(bootstrap: str, topic: str, first: int, count: int, sessions: int,
                  spread: float, stamp_ms: int | None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        t0 = time.monotonic()
        futs = []
        for n, i in enumerate(range(first, first + count)):
            if spread > 0:
                ahead = t0 + spread * n / count - time.monotonic()
                if ahead > 0:
                    await asyncio.sleep(ahead)
            d = delivery(i, sessions, "b")
            futs.append(await producer.send(topic, encode(d), key=b"rt_bench",
                                            timestamp_ms=stamp_ms))
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


# ---- the tracker process --------------------------------------------------------------------

def deep_size(svc: ReceiptService) -> int:
    seen: set[int] = set()

    def size(o: Any) -> int:
        if id(o) in seen:
            return 0
        seen.add(id(o))
        n = sys.getsizeof(o)
        if isinstance(o, dict):
            n += sum(size(k) + size(v) for k, v in o.items())
        elif isinstance(o, (list, tuple, set, frozenset)):
            n += sum(size(x) for x in o)
        elif hasattr(o, "__slots__"):
            n += sum(size(getattr(o, s)) for s in o.__slots__ if hasattr(o, s))
        return n

    return (size(svc.calls) + size(dict(svc.by_session)) + size(svc.deadlines._heap)
            + size(svc.deadlines._live))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs) * 1000, 2),
            "p99_ms": round(pct(xs, 0.99) * 1000, 2), "max_ms": round(max(xs) * 1000, 2)}


async def run(bootstrap: str, mongo: str, calls: int, window: float, spread: float,
              sessions: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    settings = Settings(**{"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "MONGODB_URI": mongo,
                           "topic_prefix": f"bench{tag}.", "mongodb_database": f"bench{tag}",
                           "receipt_window_s": window})
    configure_logging("WARNING", "console", "receipts-bench")
    topics = topics_for(settings)
    await ensure_topics(settings, topics)
    svc = ReceiptService(settings)
    total = WARMUP + calls
    await svc.db.sessions.insert_many([{"_id": ids(i, sessions)[0], "harness": "claude_code"}
                                       for i in range(min(sessions, total))])
    for lo in range(0, total, 5000):
        await svc.db.calls.insert_many([
            {"_id": "/".join(ids(i, sessions)), "name": "lookup",
             "native": {"session_id": f"native-{i % sessions}"}}
            for i in range(lo, min(total, lo + 5000))])

    facts: dict[tuple[str, str], float] = {}
    consumer = AIOKafkaConsumer(topics.core_facts, bootstrap_servers=bootstrap,
                                group_id=f"bench-{tag}", auto_offset_reset="earliest")
    await consumer.start()

    async def read_facts() -> None:
        async for r in consumer:
            f = decode(r.value)
            if f.get("kind") == "application":
                facts[(f["session_id"], f["call_id"])] = r.timestamp / 1000.0

    reader = asyncio.create_task(read_facts())
    await svc.start()
    try:
        # Warm-up: deliveries stamped overdue turn uncertain as soon as they are opened.
        stamp = int((time.time() - window - 5) * 1000)
        await child(bootstrap, topics.runtime_deliveries, calls, 0, WARMUP, sessions, 0, stamp)
        await until(lambda: len(svc.lateness) >= WARMUP, 120, "warm-up verdicts")
        warm = len(svc.lateness)
        await asyncio.sleep(1.0)
        gc.collect()
        before = rss()

        t0 = time.time()
        await child(bootstrap, topics.runtime_deliveries, calls, WARMUP, calls, sessions,
                    spread, None)
        await until(lambda: len(svc.calls) >= calls or len(svc.lateness) > warm,
                    window + spread + 120, "all calls open")
        opened_all = len(svc.calls) >= calls and len(svc.lateness) == warm
        ingest_s = time.time() - t0
        gc.collect()
        after = rss()
        retained = deep_size(svc)
        pending = len(svc.calls)
        deadlines = {k: r.deadline for k, r in svc.calls.items() if r.deadline is not None}

        await until(lambda: len(svc.lateness) >= warm + calls, window + spread + 300,
                    "all verdicts")
        await until(lambda: all(k in facts for k in deadlines), 60, "verdict records read")
        tracker = svc.lateness[warm:]
        kafka = [facts[k] - d for k, d in deadlines.items()]
        early = sum(1 for x in kafka if x < 0)
        return {
            "case": "receipts_deadlines",
            "calls": calls, "window_s": window, "spread_s": spread, "sessions": sessions,
            "pending_at_peak": pending, "all_open_before_first_deadline": opened_all,
            "ingest_s": round(ingest_s, 2),
            "tracker_lateness": summary(tracker),
            "kafka_lateness": summary(kafka),
            "verdicts_before_deadline": early,
            "rss_before_mb": round(before / 2**20, 1), "rss_after_mb": round(after / 2**20, 1),
            "rss_per_call_bytes": round((after - before) / pending),
            "retained_per_call_bytes": round(retained / max(1, pending)),
            "targets": {"p99_ms": 100, "bytes_per_call": 2048},
        }
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        await consumer.stop()
        await svc.stop()


async def child(bootstrap: str, topic: str, calls: int, first: int, count: int, sessions: int,
                spread: float, stamp_ms: int | None) -> None:
    cmd = [sys.executable, SELF, "--produce", bootstrap, topic, str(first), str(count),
           "--sessions", str(sessions), "--spread", str(spread), "--calls", str(calls)]
    if stamp_ms is not None:
        cmd += ["--stamp-ms", str(stamp_ms)]
    proc = await asyncio.create_subprocess_exec(*cmd)
    if await proc.wait() != 0:
        raise RuntimeError(f"producer failed: {cmd}")


async def until(pred: Any, timeout: float, what: str) -> None:  # noqa: ASYNC109
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(0.05)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--spread", type=float, default=5.0,
                    help="seconds over which the deliveries are published")
    ap.add_argument("--sessions", type=int, default=1_000)
    ap.add_argument("--produce", nargs=4, metavar=("BOOTSTRAP", "TOPIC", "FIRST", "COUNT"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--stamp-ms", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.produce:
        b, t, first, count = args.produce
        asyncio.run(produce(b, t, int(first), int(count), args.sessions, args.spread,
                            args.stamp_ms))
        return None
    with infrastructure() as (bootstrap, mongo, kind):
        progress(f"stack: {kind} ({bootstrap}, {mongo})")
        result = asyncio.run(run(bootstrap, mongo, args.calls, args.window, args.spread,
                                 args.sessions))
    result["stack"] = kind
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

"""Receipt deadlines at scale: one real ``ReceiptService`` holding 10 000
pending calls, its verdicts turned into Items by the real storage service. Prints one JSON
result dict.

    python bench/receipts_deadlines.py [--calls 10000] [--window 10] [--spread 5] [--sessions 1000]

How:
* The stack comes from ``KAFKA_BOOTSTRAP_SERVERS`` + ``MONGODB_URI``, else a private local stack
  (``deploy.local.stack.Stack`` on free ports, stopped at the end). Topics and database are the
  run's own. ``core.facts`` and ``session.items`` are created with ``LogAppendTime``: a record's
  timestamp is when the broker appended it.
* The product (``bench.serve_product``: admission + storage, one process) runs beside this one;
  the Sessions are created through its HTTP API (claude_code), so storage holds them as it
  would. Each call's announced record (``calls``: name, native session) is written to the store
  as storage writes it from the harness's ``function_call``, so the tracker's look-ups are real.
* Warm-up: 500 deliveries stamped already overdue turn ``uncertain`` at once (allocator, client
  buffers, storage's caches and code paths warm); the run waits for their Items.
* A child process publishes ``--calls`` ``function_result`` deliveries to ``runtime.deliveries``
  at a steady rate over ``--spread`` seconds. The child's memory is not the tracker's.
* RSS of this process (the tracker) before and after all calls are open, divided by the calls:
  ``rss_per_call_bytes``; ``retained_per_call_bytes`` is the deep size of the tracker's own
  per-call structures (records, heap, indexes), a noise-free cross-check.
* Lateness, over **every** call (not only those pending at some moment): deadline = the
  delivery record's Kafka timestamp + window (read back by an independent consumer, after
  the verdicts: only ``session.items`` is read while they fall due, so the bench's reading
  does not compete with what it measures; append times do not depend on when they are read);
  ``item_lateness`` = the broker append time of the call's ``function_call_application`` Item
  on ``session.items`` minus the deadline — where a consumer sees the verdict (the figure the
  target is about). The profile splits it: ``fact_lateness`` = the ``application`` fact's append
  time on ``core.facts`` minus the deadline (the tracker's share), ``storage_delay`` = Item
  append time minus fact append time (storage's share). ``storage_timings`` is storage's wall
  time per awaited step over the measured phase (``serve_product --timings``, signalled after
  the warm-up). ``cpu_while_due`` = the cores each process used (``bench.cpu``: the product, the
  store, the broker, this process — the tracker and the bench's Item tail) in each second from
  the first deadline to the last Item: whether the machine had a core to spare while the
  verdicts fell due.
Targets: p99 ≤ 100 ms over all calls, ≤ 2 KB per pending call.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # noqa: E402
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: E402

from bench.common import Infra, free_port  # noqa: E402
from bench.common import infrastructure as common_infrastructure  # noqa: E402
from bench.cpu import CpuSampler, stack_pids  # noqa: E402
from bench.load import start_server  # noqa: E402
from services.receipts.app import ReceiptService  # noqa: E402
from shared import eventloop  # noqa: E402
from shared.kafka import (  # noqa: E402
    assign_all,
    decode,
    encode,
    ensure_topics,
    max_record_bytes,
)
from shared.logging import configure_logging  # noqa: E402
from shared.service import cancel  # noqa: E402
from shared.settings import Settings  # noqa: E402
from shared.topics import topics_for  # noqa: E402

WARMUP = 500
DEFAULT_WARMUP = WARMUP
SELF = str(Path(__file__).resolve())
PAGE = resource.getpagesize()
LOGS = Path(tempfile.mkdtemp(prefix="receipts-bench-logs-"))


def progress(msg: str) -> None:
    sys.stderr.write(f"[receipts-bench {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@contextlib.contextmanager
def infrastructure() -> Iterator[tuple[str, str, str]]:
    with common_infrastructure() as infra:
        yield infra.bootstrap, infra.mongodb_uri, infra.kind


def call_id(i: int) -> str:
    return f"toolu_{i:08d}"


def delivery(i: int, sid: str, tag: str) -> dict[str, Any]:
    return {"schema": "runtime.delivery/1", "delivery_id": f"dlv_{tag}{i:08d}",
            "runtime_id": "rt_bench", "session_id": sid, "turn_id": "turn_bench",
            "kind": "function_result", "call_id": call_id(i), "name": "lookup", "success": True,
            "content": [{"type": "input_text", "text": f"result {i}: " + "x" * 64}]}


# ---- the child process: the deliveries -------------------------------------------------------

async def produce(bootstrap: str, topic: str, first: int, count: int, sids: list[str],
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
            d = delivery(i, sids[i % len(sids)], "b")
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

    t = svc.tracker
    return (size(t.calls) + size(dict(t.by_session)) + size(t.deadlines._heap)
            + size(t.deadlines._live))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    return {"n": len(xs), "p50_ms": round(statistics.median(xs) * 1000, 2),
            "p90_ms": round(pct(xs, 0.90) * 1000, 2),
            "p99_ms": round(pct(xs, 0.99) * 1000, 2), "max_ms": round(max(xs) * 1000, 2)}


class Tail:
    """Reads a topic from its beginning (manual assignment, no group): ``on(record)``."""

    def __init__(self, bootstrap: str, topic: str,
                 on: Callable[[Any], None]) -> None:
        # (the broker answers a fetch as soon as one record is there: the default wait only
        # bounds an empty one, so an idle tail does not poll the broker every few ms)
        self.consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                         enable_auto_commit=False,
                                         max_partition_fetch_bytes=16 * 1024 * 1024)
        self.topic, self.on = topic, on
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        await assign_all(self.consumer, self.topic, at_end=False)
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            for recs in (await self.consumer.getmany(timeout_ms=100,
                                                      max_records=5000)).values():
                for r in recs:
                    self.on(r)

    async def stop(self) -> None:
        await cancel(self.task)
        await self.consumer.stop()


async def create_topics(settings: Settings) -> None:
    """The run's topics; ``core.facts`` and ``session.items`` stamped by the broker."""
    topics = topics_for(settings)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        cfg = {"max.message.bytes": str(max_record_bytes(settings)),
               "retention.ms": str(settings.topic_retention_ms),
               "message.timestamp.type": "LogAppendTime"}
        await admin.create_topics([
            NewTopic(t, num_partitions=settings.topic_partitions,
                     replication_factor=settings.topic_replication_factor, topic_configs=cfg)
            for t in (topics.core_facts, topics.session_items)])
    finally:
        await admin.close()
    await ensure_topics(settings, topics)


async def create_sessions(base_url: str, n: int) -> list[str]:
    async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
        async def one(i: int) -> str:
            for _ in range(5):
                r = await http.post("/v1/sessions", json={
                    "harness": "claude_code", "placement": "none",
                    "input": f"receipts bench session {i}"})
                if r.status_code == 201:
                    return str(r.json()["id"])
                await asyncio.sleep(1)
            raise RuntimeError(f"create session: {r.status_code} {r.text[:300]}")

        out: list[str] = []
        for k in range(0, n, 32):
            out += await asyncio.gather(*(one(i) for i in range(k, min(n, k + 32))))
        return out


async def run(bootstrap: str, mongo: str, calls: int, window: float, spread: float,
              sessions: int, storage: bool = True, profile: str | None = None
              ) -> dict[str, Any]:
    tag = f"benchrcpt{uuid.uuid4().hex[:8]}"
    infra = Infra(bootstrap, mongo, "external")
    settings: Settings = infra.settings(tag, receipt_window_s=window)
    configure_logging("WARNING", "console", "receipts-bench")
    topics = topics_for(settings)
    await create_topics(settings)
    port = free_port()
    product = start_server(
        "product (admission + storage)", "bench.serve_product",
        ["--timings", *(["--profile", profile] if profile else [])],
        infra.env(tag, SESSION_CORE_HTTP_PORT=str(port), SESSION_CORE_LOG_LEVEL="WARNING"),
        LOGS / f"product-{tag}.log") if storage else None
    svc = ReceiptService(settings)
    total = WARMUP + calls
    handed: dict[tuple[str, str], float] = {}
    facts: dict[tuple[str, str], float] = {}
    items: dict[tuple[str, str], tuple[float, float, str]] = {}
    extra_items = 0

    def on_delivery(r: Any) -> None:
        d = decode(r.value)
        handed[(d["session_id"], d["call_id"])] = r.timestamp / 1000.0

    def on_fact(r: Any) -> None:
        f = decode(r.value)
        if f.get("kind") == "application":
            facts.setdefault((f["session_id"], f["call_id"]), r.timestamp / 1000.0)

    def on_item(r: Any) -> None:
        nonlocal extra_items
        it = decode(r.value)
        if it.get("type") == "function_call_application":
            key = (it["session_id"], it["call_id"])
            if key in items:
                extra_items += 1
            else:
                items[key] = (r.timestamp / 1000.0, time.time(), str(it.get("state")))

    # Only the verdicts' Items are read while the calls fall due (to know when they are all
    # in, and ``item_seen_lateness``); the deliveries and facts are read back afterwards. Their
    # timestamps are the broker's append times either way, and the bench's own reading of two
    # more topics (~20 000 records, decoded in the tracker's event loop) would otherwise
    # compete with the tracker and storage for the two cores while they are measured.
    # (With --no-storage the facts are what is measured: every tail reads from the start.)
    tails = [Tail(bootstrap, topics.session_items, on_item)]
    later = [Tail(bootstrap, topics.runtime_deliveries, on_delivery),
             Tail(bootstrap, topics.core_facts, on_fact)]
    if product is None:
        tails, later = tails + later, []
    storage_timings = ""
    result: dict[str, Any] = {}
    cpu = CpuSampler({**({"product": product.proc.pid} if product else {}),
                      **stack_pids(mongo), "tracker+bench": os.getpid()}).start()
    try:
        t0 = time.time()
        if product is not None:
            sids = await create_sessions(f"http://127.0.0.1:{port}", min(sessions, total))
        else:
            sids = [f"session_{uuid.uuid4().hex}" for _ in range(min(sessions, total))]
        progress(f"{len(sids)} Sessions created in {time.time() - t0:.1f}s")
        for lo in range(0, total, 5000):
            # the calls as the tracker learns them from the harness's announcements
            await svc.db.receipt_calls.insert_many([
                {"_id": f"{sids[i % len(sids)]}/{call_id(i)}", "session_id": sids[i % len(sids)],
                 "harness": "claude_code", "name": "lookup",
                 "native": {"session_id": f"native-{i % len(sids)}"}}
                for i in range(lo, min(total, lo + 5000))])
        for t in tails:
            await t.start()
        await svc.start()

        # Warm-up: deliveries stamped overdue turn uncertain as soon as they are opened.
        stamp = int((time.time() - window - 5) * 1000)
        await child(bootstrap, topics.runtime_deliveries, calls, 0, WARMUP, sids, 0, stamp)
        seen = items if product is not None else facts
        await until(lambda: len(seen) >= WARMUP, 300, "warm-up verdicts")
        warm = len(svc.tracker.lateness)
        await asyncio.sleep(1.0)
        if product is not None:  # storage's timings from here on are the measured phase's
            product.proc.send_signal(signal.SIGUSR1)
        gc.collect()
        before = rss()

        t0 = time.time()
        first_due = time.monotonic() + window
        await child(bootstrap, topics.runtime_deliveries, calls, WARMUP, calls, sids,
                    spread, None)
        await until(lambda: len(svc.tracker.calls) >= calls or len(svc.tracker.lateness) > warm,
                    window + spread + 120, "all calls open")
        opened_all = len(svc.tracker.calls) >= calls and len(svc.tracker.lateness) == warm
        ingest_s = time.time() - t0
        gc.collect()
        after = rss()
        retained = deep_size(svc)
        pending = len(svc.tracker.calls)

        mine = [(sids[i % len(sids)], call_id(i)) for i in range(WARMUP, total)]
        await until(lambda: all(k in seen for k in mine), window + spread + 600,
                    f"the {'Items' if product else 'facts'} of all {calls} verdicts")
        due_cpu = cpu.window(first_due, time.monotonic())
        await asyncio.sleep(1.0)  # a second Item for a call, if any, shows up
        for t in later:
            tails.append(t)
            await t.start()
        await until(lambda: all(k in handed and k in facts for k in mine), 60,
                    "delivery and fact records read back")
        deadline = {k: handed[k] + window for k in mine}
        fact_late = [facts[k] - deadline[k] for k in mine]
        item_late = [items[k][0] - deadline[k] for k in mine if k in items]
        seen_late = [items[k][1] - deadline[k] for k in mine if k in items]
        storage_delay = [items[k][0] - facts[k] for k in mine if k in items]
        states: dict[str, int] = {}
        for k in mine:
            if k in items:
                states[items[k][2]] = states.get(items[k][2], 0) + 1
        result = {
            "case": "receipts_deadlines",
            "calls": calls, "window_s": window, "spread_s": spread, "sessions": len(sids),
            "pending_at_peak": pending, "all_open_before_first_deadline": opened_all,
            "ingest_s": round(ingest_s, 2),
            "item_lateness": summary(item_late),
            "item_seen_lateness": summary(seen_late),
            "fact_lateness": summary(fact_late),
            "storage_delay": summary(storage_delay),
            "measured_at": "session.items" if product else "core.facts (--no-storage)",
            "tracker_lateness": summary(list(svc.tracker.lateness)[warm:]),
            "verdicts_before_deadline": sum(1 for x in fact_late if x < 0),
            "item_states": states, "duplicate_items": extra_items,
            "rss_before_mb": round(before / 2**20, 1), "rss_after_mb": round(after / 2**20, 1),
            "rss_per_call_bytes": round((after - before) / max(1, pending)),
            "retained_per_call_bytes": round(retained / max(1, pending)),
            "cpu_while_due": due_cpu,
            "lateness_samples_ms": [round(x * 1000, 1) for x in (item_late or fact_late)],
            "targets": {"p99_ms": 100, "bytes_per_call": 2048},
        }
    finally:
        cpu.stop()
        for t in tails:
            with contextlib.suppress(Exception):
                await t.stop()
        await svc.stop()
        if product is not None:
            product.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                product.proc.wait(timeout=30)
            if product.proc.poll() is None:
                product.proc.kill()
            storage_timings = timings_from(product.log)
        if storage_timings:
            progress("storage (bench.serve_product --timings):\n" + storage_timings)
    result["storage_timings"] = storage_timings
    return result


def timings_from(log: Path) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    i = text.rfind("wall time per awaited step")  # the last report: the measured phase
    return text[i:].strip() if i >= 0 else ""


async def child(bootstrap: str, topic: str, calls: int, first: int, count: int,
                sids: list[str], spread: float, stamp_ms: int | None) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(sids, f)
    cmd = [sys.executable, SELF, "--produce", bootstrap, topic, str(first), str(count),
           "--sids", f.name, "--spread", str(spread), "--calls", str(calls)]
    if stamp_ms is not None:
        cmd += ["--stamp-ms", str(stamp_ms)]
    try:
        proc = await asyncio.create_subprocess_exec(*cmd)
        if await proc.wait() != 0:
            raise RuntimeError(f"producer failed: {cmd}")
    finally:
        os.unlink(f.name)


async def until(pred: Any, timeout: float, what: str) -> None:  # noqa: ASYNC109
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise TimeoutError(f"{what}: not within {timeout:g} s")
        await asyncio.sleep(0.05)


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    global WARMUP
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--spread", type=float, default=5.0,
                    help="seconds over which the deliveries are published")
    ap.add_argument("--sessions", type=int, default=1_000)
    ap.add_argument("--warmup", type=int, default=DEFAULT_WARMUP,
                    help="overdue calls sent first (their verdicts are not measured)")
    ap.add_argument("--no-storage", action="store_true",
                    help="profile the tracker alone: no storage, lateness at core.facts")
    ap.add_argument("--profile", default=None, metavar="OUT",
                    help="run storage (bench.serve_product) under pyinstrument; report to OUT")
    ap.add_argument("--produce", nargs=4, metavar=("BOOTSTRAP", "TOPIC", "FIRST", "COUNT"),
                    help=argparse.SUPPRESS)
    ap.add_argument("--sids", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--stamp-ms", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    WARMUP = args.warmup
    if args.produce:
        b, t, first, count = args.produce
        sids = json.loads(Path(args.sids).read_text())
        asyncio.run(produce(b, t, int(first), int(count), sids, args.spread, args.stamp_ms))
        return None
    with infrastructure() as (bootstrap, mongo, kind):
        progress(f"stack: {kind} ({bootstrap}, {mongo})")
        result = eventloop.run(run(bootstrap, mongo, args.calls, args.window, args.spread,
                                 args.sessions, storage=not args.no_storage,
                                 profile=args.profile))
    result["stack"] = kind
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()

"""Case 2 — the pipeline: HTTP ``POST /v1/sessions/{id}/events`` → Item on ``session.items``.

Product: ``bench.serve_product`` (admission + storage in one process; dispatcher and receipts left
out — nothing on this path waits for them) on the real stack. Baseline: ``bench.baseline_pipeline``
(same hops, no product logic, one process; it answers 202 only after its consumer's reply, as the
product does after storage's, with the same batch limits). Each runs alone (never both at
once), driven from this process by ``CLIENTS`` concurrent httpx clients over real HTTP; the
rate is Items/s seen on the Item topic. Then p50/p99 latency (send → Item) of both at half the
product's rate, open loop. And, first, the raw aiokafka relay's rate on the same broker (the
ceiling, information only; it also warms a just-started broker for both sides).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

import httpx
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from bench.common import (
    BENCH_DIR,
    Infra,
    Result,
    Run,
    Spread,
    free_port,
    new_tag,
    plot_latencies,
    prepare_topics,
    progress,
    topics_ready,
)
from bench.cpu import cpu_snapshot, cpu_spent, stack_pids
from bench.load import (
    Collector,
    Latency,
    Target,
    Throughput,
    message_body,
    open_loop,
    saturate,
    start_server,
)
from shared.topics import topics_for

CLIENTS = 48
SESSIONS = 64
LOGS = Path(tempfile.mkdtemp(prefix="session-core-bench-logs-"))


async def create_sessions(base_url: str, n: int, harness: str = "codex") -> list[str]:
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
        async def one(i: int) -> str:
            r = await http.post("/v1/sessions", json={
                "harness": harness, "placement": "none", "input": f"bench session {i}"})
            if r.status_code != 201:
                raise RuntimeError(f"create session: {r.status_code} {r.text[:300]}")
            sid: str = r.json()["id"]
            return sid

        out: list[str] = []
        for k in range(0, n, 16):
            out += await asyncio.gather(*(one(i) for i in range(k, min(n, k + 16))))
        return out


async def preflight(target: Target, collector: Collector) -> None:
    """One request end to end, so consumer groups have joined before anything is timed."""
    deadline = time.monotonic() + 90
    async with httpx.AsyncClient(base_url=target.base_url, timeout=60) as http:
        while True:
            n = next(target.counter)
            r = await http.post(target.path(0), content=message_body(n),
                                headers={"content-type": "application/json"})
            if r.status_code >= 300:
                raise RuntimeError(f"preflight: {r.status_code} {r.text[:300]}")
            try:
                await collector.wait(n, timeout=15)
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise


def _windows(quick: bool) -> tuple[float, int, float, float]:
    """(warmup, windows, window seconds, latency seconds)"""
    return (2.0, 3, 2.0, 6.0) if quick else (3.0, 5, 3.0, 15.0)


async def _product(infra: Infra, quick: bool, profile: bool) -> Measured:
    tag = new_tag("pipe")
    port = free_port()
    settings = infra.settings(tag)
    args = ["--profile", str(LOGS / "profile_pipeline")] if profile else []
    await prepare_topics(infra, tag)
    server = start_server("product", "bench.serve_product", args,
                          infra.env(tag, SESSION_CORE_HTTP_PORT=str(port)),
                          LOGS / "product.log")
    collector = Collector(infra.bootstrap, topics_for(settings).session_items)
    try:
        base = f"http://127.0.0.1:{port}"
        sessions = await create_sessions(base, SESSIONS)
        await collector.start()
        meter = CpuMeter(server.proc.pid, infra.mongodb_uri, collector)
        return await _measure("product", Target(base, sessions), collector, quick, meter)
    finally:
        await collector.stop()
        server.stop()
        if profile:
            progress(f"  profile and await timings: {LOGS}/profile_pipeline.txt|.html, "
                     f"{LOGS}/product.log; {len(collector.arrived)} Items in all: python -m "
                     f"bench.summarize_profile {LOGS}/profile_pipeline.pyisession --items "
                     f"{len(collector.arrived)}")


async def _baseline(infra: Infra, quick: bool, half: float) -> Measured:
    tag = new_tag("base")
    port = free_port()
    await create_plain_topics(infra, [f"{tag}.in", f"{tag}.items"])
    server = start_server("baseline", "bench.baseline_pipeline", ["pipeline"],
                          infra.env(tag, SESSION_CORE_HTTP_PORT=str(port)),
                          LOGS / "baseline.log")
    collector = Collector(infra.bootstrap, f"{tag}.items")
    try:
        base = f"http://127.0.0.1:{port}"
        await collector.start()
        target = Target(base, [f"session_{uuid4().hex}" for _ in range(SESSIONS)])
        meter = CpuMeter(server.proc.pid, infra.mongodb_uri, collector)
        return await _measure("baseline", target, collector, quick, meter, half)
    finally:
        await collector.stop()
        server.stop()


@dataclass
class CpuPerItem:
    """CPU seconds per Item of the server's processes (``server``: the process and its
    descendants), the store's and the broker's, over a span in which ``items`` Items came."""

    items: int
    seconds: float
    spent: dict[str, float | None]

    def per_item_ms(self, name: str) -> float | None:
        s = self.spent.get(name)
        return None if s is None or self.items <= 0 else 1000 * s / self.items

    def text(self) -> str:
        parts = ", ".join(f"{n} {self.per_item_ms(n):.3f}" if self.per_item_ms(n) is not None
                          else f"{n} -" for n in self.spent)
        return (f"ms CPU per Item {parts} ({self.items} Items in {self.seconds:.1f}s; CPU s "
                + ", ".join(f"{n} {v:.2f}" if v is not None else f"{n} -"
                            for n, v in self.spent.items()) + ")")


class CpuMeter:
    """``mark()``: the CPU seconds so far of the server's process tree, the store and the
    broker (from /proc, as ``bench.cpu``), the Items seen so far and the time."""

    def __init__(self, server_pid: int, store_uri: str, collector: Collector) -> None:
        self.trees = {"server": server_pid}
        self.processes = stack_pids(store_uri)
        self.collector = collector

    def mark(self) -> tuple[float, int, dict[str, float | None]]:
        return (time.monotonic(), len(self.collector.arrived),
                cpu_snapshot(self.trees, self.processes))

    @staticmethod
    def between(a: tuple[float, int, dict[str, float | None]],
                b: tuple[float, int, dict[str, float | None]], items: int | None = None
                ) -> CpuPerItem:
        return CpuPerItem(b[1] - a[1] if items is None else items, b[0] - a[0],
                          cpu_spent(a[2], b[2]))


@dataclass
class Measured:
    tp: Throughput
    half: float
    lat: Latency
    cpu_saturated: CpuPerItem
    cpu_half: CpuPerItem


async def _measure(who: str, target: Target, collector: Collector, quick: bool, meter: CpuMeter,
                   half: float | None = None) -> Measured:
    """The throughput with ``CLIENTS`` closed-loop clients, then the latency in an open loop at
    ``half`` requests/s (by default half the throughput just measured): the same steps, with
    the same pauses, for the product and the baseline. The CPU per Item over the saturated
    windows, and over the whole open loop (its lead-in and the stragglers' wait included)."""
    await preflight(target, collector)
    warmup, windows, window, lat_s = _windows(quick)
    progress(f"  {who}: saturating with {CLIENTS} clients over {len(target.sessions)} Sessions")
    tp = await saturate(target, collector, clients=CLIENTS, warmup=warmup, windows=windows,
                        window=window, mark=meter.mark)
    assert tp.marks is not None
    sat = CpuMeter.between(*tp.marks, items=tp.window_items)
    progress(f"  {who}: {tp.rate.text('{:.1f}')} Items/s; statuses {tp.statuses}; "
             f"{sat.text()}")
    if half is None:
        half = max(1.0, tp.rate.median / 2)
    # let the consumer drain what the HTTP side queued before timing latency
    await _drain(collector)
    progress(f"  {who}: open loop at {half:.1f}/s for {lat_s:.0f}s")
    m0 = meter.mark()
    lat = await open_loop(target, collector, rate=half, duration=lat_s)
    at_half = CpuMeter.between(m0, meter.mark())
    progress(f"  {who}: p50 {lat.p50:.1f} ms p99 {lat.p99:.1f} ms "
             f"(n={len(lat.samples_ms)}, lost {lat.lost}, errors {lat.errors}); "
             f"{at_half.text()}")
    return Measured(tp, half, lat, sat, at_half)


async def _drain(collector: Collector, quiet: float = 1.0, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    last = -1
    while time.monotonic() < deadline:
        n = len(collector.arrived)
        if n == last:
            return
        last = n
        await asyncio.sleep(quiet)


async def create_plain_topics(infra: Infra, names: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=infra.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, num_partitions=6, replication_factor=1)
                                   for t in names])
    finally:
        await admin.close()
    await topics_ready(infra.bootstrap, names)
    await asyncio.sleep(2.0)


async def _relay(infra: Infra, quick: bool) -> Spread:
    tag = new_tag("relay")
    in_topic, items_topic = f"{tag}.in", f"{tag}.items"
    await create_plain_topics(infra, [in_topic, items_topic])
    n = 10_000 if quick else 40_000
    producer = AIOKafkaProducer(bootstrap_servers=infra.bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futs = [await producer.send(in_topic, message_body(i), key=str(i % SESSIONS).encode())
                for i in range(n)]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()
    collector = Collector(infra.bootstrap, items_topic)
    await collector.start()
    server = start_server("relay", "bench.baseline_pipeline", ["relay"],
                          infra.env(tag), LOGS / "relay.log")
    try:
        progress(f"  relay: {n} records queued; relaying")
        deadline = time.monotonic() + 120
        while len(collector.arrived) < n and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
    finally:
        await collector.stop()
        server.stop()
    times = sorted(collector.arrived.values())
    if len(times) < 100:
        raise RuntimeError(f"relay delivered only {len(times)} of {n}")
    # rate over five consecutive slices of the middle 80 % of arrivals
    lo, hi = len(times) // 10, len(times) * 9 // 10
    step = (hi - lo) // 5
    rates = [step / max(1e-9, times[lo + (k + 1) * step] - times[lo + k * step])
             for k in range(5)]
    return Spread.of(rates)


CPU_TARGET = "<= 1.5"


def add_cpu_rows(run_: Run, prod: Measured, base: Measured) -> None:
    """CPU per Item: the product's processes against the fair baseline's in the saturated
    windows (the target: what one replica's cores carry at full load), then the store's and the
    broker's in the same windows, and all three again at the same rate for both (the open
    loop at half the product's rate)."""
    ps, bs = prod.cpu_saturated, base.cpu_saturated
    ph, bh = prod.cpu_half, base.cpu_half
    common = (f"product {prod.tp.rate.median:.1f} Items/s, baseline {base.tp.rate.median:.1f}; "
              f"product: {ps.text()}; baseline: {bs.text()}")
    run_.add(Result("2_pipeline_cpu_per_item", ps.per_item_ms("server"),
                    bs.per_item_ms("server"), CPU_TARGET, "ms CPU/Item",
                    "CPU seconds (user+system, /proc) of all the product's processes (the "
                    "server and its descendants) per Item, over the saturated windows, against "
                    f"the fair baseline's process over its own; {common}"))
    for part in ("store", "broker"):
        run_.add(Result(f"2_pipeline_cpu_per_item_{part}", ps.per_item_ms(part),
                        bs.per_item_ms(part), "info", "ms CPU/Item",
                        f"the {part}'s CPU per Item over the saturated windows, while the "
                        f"product ran against while the baseline ran; {common}"))
    run_.add(Result("2_pipeline_cpu_per_item_half_rate", ph.per_item_ms("server"),
                    bh.per_item_ms("server"), "info", "ms CPU/Item",
                    f"the product's processes against the baseline's at the same rate "
                    f"({prod.half:.1f}/s, the latency loop: its 2 s lead-in and the wait for "
                    f"stragglers included); product: {ph.text()}; baseline: {bh.text()}"))


def run(run_: Run, infra: Infra, quick: bool = False, profile: bool = False) -> float:
    # The relay first: on a stack the runner has just started, whichever side went first met
    # a broker whose JVM serves its first thousands of requests on cold code (case 5 measured
    # that: 1.55–1.80× with one warm-up pair). The relay's 40 000 records warm it for both.
    r_rate = asyncio.run(_relay(infra, quick))
    prod = asyncio.run(_product(infra, quick, profile))
    half, p_rate, p_lat, statuses = prod.half, prod.tp.rate, prod.lat, prod.tp.statuses
    base = asyncio.run(_baseline(infra, quick, half))
    b_rate, b_lat = base.tp.rate, base.lat
    run_.add(Result("2_pipeline_throughput", p_rate.median, b_rate.median, ">= 0.5", "Items/s",
                    f"{CLIENTS} httpx clients, {SESSIONS} Sessions, admission+storage in one "
                    f"process (no dispatcher/receipts); product {p_rate.text('{:.1f}')}; "
                    f"fair baseline (same hops, 202 after the consumer's reply, same batch "
                    f"limits) {b_rate.text('{:.1f}')}; ceiling (raw relay, no HTTP/store) "
                    f"{r_rate.median:.0f} records/s, product / ceiling "
                    f"{p_rate.median / max(1e-9, r_rate.median):.4f}; product statuses "
                    f"{json.dumps(statuses)}"))
    for p in (50, 99):
        pv = p_lat.p50 if p == 50 else p_lat.p99
        bv = b_lat.p50 if p == 50 else b_lat.p99
        run_.add(Result(f"2_pipeline_latency_p{p}", pv, bv, "info", "ms",
                        f"open loop at {half:.1f}/s (half the product's rate), both; "
                        f"product n={len(p_lat.samples_ms)} lost={p_lat.lost} "
                        f"max={p_lat.max:.0f}ms; baseline n={len(b_lat.samples_ms)} "
                        f"lost={b_lat.lost} max={b_lat.max:.0f}ms"))
    run_.add(Result("2_relay_ceiling", r_rate.median, None, "info", "records/s",
                    f"raw aiokafka consume→produce (acks=all), pre-queued records; "
                    f"{r_rate.text('{:.0f}')}"))
    add_cpu_rows(run_, prod, base)
    png = plot_latencies(BENCH_DIR / "pipeline_latency.png",
                         f"HTTP → Item latency at {half:.0f} req/s",
                         {"product": p_lat.samples_ms, "baseline": b_lat.samples_ms})
    if png:
        progress(f"  plot: {png}")
    return p_rate.median

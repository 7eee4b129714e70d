"""Case 3 — growth: p99 HTTP → Item latency with 1 000, 100 000 and 1 000 000 Items already
stored, (A) in one Session and (B) across Sessions (10 Items each: 100, 10 000, 100 000 Sessions).

The store is pre-filled directly, in exactly the shape storage writes: each filler record goes
through the domain's own ``decide_message`` and ``StorageRepository.journal_doc``, then Items
via ``storecodec.item_doc``, journal entries as ``write()`` stores them, and Sessions as
``SessionState.to_doc()`` + ``storecodec.pack`` — so the journal, Items and Sessions grow as they
would have. This bulk load goes straight to the store (``insert_many`` of 1 000 documents, one
write in flight while the next batch is decided; the pipeline is not involved), which is what
keeps 10⁶ Items affordable. Phases run in one database, growing it: for each size, fill the one
Session and the Sessions across up to it, then measure one, then across — after ~24 s of
unmeasured warm-up traffic before the first phase (``_warm_up``), and, before each phase, a
``sync`` of the bulk load's unwritten pages and a quiet second (``bench.cpu.quiesce``).
Before the largest size the product and the store are restarted: the first repeat copies the
store's files aside right after the largest fill, later repeats (``--repeat``) copy them back
into their own fresh stack instead of filling again (``FillSnapshot``); the restarted product is
warmed up again and touches again every Session it had seen, unmeasured.
Traffic is an open loop at the same rate in every phase (half the pipeline's saturated rate
when case 2 ran, else 10/s). Targets: p99(100 000) ≤ 1.2 × p99(1 000),
p99(1 000 000) ≤ 1.5 × p99(1 000), with 0 failed requests (the table's ``failed`` column: 504s
and requests whose Item never came).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

from pymongo import AsyncMongoClient

from bench.common import (
    BENCH_DIR,
    Infra,
    Result,
    Run,
    free_port,
    new_tag,
    percentile,
    plot_latencies,
    prepare_topics,
    progress,
)
from bench.cpu import CpuSampler, quiesce, stack_pids
from bench.load import (
    Collector,
    Latency,
    RawHttp,
    Server,
    Target,
    items_arrived,
    open_loop,
    post_ok,
    start_server,
)
from bench.pipeline import preflight
from services.storage.domain.sessions import SessionState, decide_message
from services.storage.repository import StorageRepository
from shared.ids import new_id
from shared.kafka import now_rfc3339
from shared.storecodec import dumps, item_doc, pack, unpack
from shared.storekeys import item_source
from shared.topics import topics_for

LOGS = Path(tempfile.mkdtemp(prefix="session-core-bench-growth-"))
FILL_TEXT = "an earlier message in this Session, stored before the benchmark began"
BATCH = 1000


class Filler:
    """Writes decided filler records straight into the store, in storage's shapes."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.repo = StorageRepository(db, 256 * 1024, 1024 * 1024)
        self.items: list[dict[str, Any]] = []
        self.journal: list[dict[str, Any]] = []
        self.sessions: list[dict[str, Any]] = []
        self.written = 0
        self.pending: asyncio.Task[None] | None = None

    async def session(self, sid: str | None, count: int) -> str:
        """Add ``count`` message Items to Session ``sid`` (created when None)."""
        now = now_rfc3339()
        created = sid is None
        if sid is None:
            sid = new_id("session")
            state = SessionState(session_id=sid, harness="codex", placement="none",
                                 created_at=now, turn_id=new_id("turn"), turn_running=True)
        else:
            doc = unpack(await self.db.sessions.find_one({"_id": sid}))
            assert doc is not None
            state = SessionState.from_doc(doc)
        for _ in range(count):
            record = {"request_id": new_id("req"), "event_id": new_id("evt"),
                      "messages": [{"role": "user", "content": [
                          {"type": "input_text", "text": FILL_TEXT}]}],
                      "fingerprint": uuid4().hex}
            d = decide_message(state, record, now)
            assert d.state is not None
            state = d.state
            jdoc, _chunks = self.repo.journal_doc(d)
            self.journal.append({"_id": jdoc["_id"], "session_id": jdoc["session_id"],
                                 "payload": dumps(jdoc)})
            self.items += [item_doc(it, item_source(jdoc["_id"], it["sequence"]))
                           for it in jdoc["items"]]
            if len(self.items) >= BATCH:
                await self.flush(background=True)
        body = pack({k: v for k, v in state.to_doc().items() if k != "_id"})
        if created:  # new Sessions are written in bulk with the next flush
            self.sessions.append({"_id": sid, **body})
        else:
            await self.db.sessions.update_one({"_id": sid}, {"$set": body})
        return sid

    async def flush(self, background: bool = False) -> None:
        """Write what is buffered; in the background the store works while the next batch is
        built (one write in flight at a time)."""
        if self.pending is not None:
            await self.pending
            self.pending = None
        items, journal, sessions = self.items, self.journal, self.sessions
        self.items, self.journal, self.sessions = [], [], []

        async def write() -> None:
            if items:
                await self.db.items.insert_many(items, ordered=False)
                self.written += len(items)
            if journal:
                await self.db.journal.insert_many(journal, ordered=False)
            if sessions:
                await self.db.sessions.insert_many(sessions, ordered=False)

        if background:
            self.pending = asyncio.create_task(write())
        else:
            await write()


STALL_MS = 250.0  # a request this slow: a stall (in the small phase, the denominator stalled)


async def _phase(name: str, target: Target, collector: Collector, rate: float, seconds: float,
                 sessions: list[str], probes: Probes) -> Latency:
    rng = random.Random(name)
    try:
        await preflight(Target(target.base_url, sessions[:1], target.counter), collector)
    except (RuntimeError, TimeoutError) as exc:  # a 504 here is a finding, not a crash
        progress(f"  {name}: preflight failed ({str(exc)[:80]}); measuring anyway")
    # the bulk load's writes reach the disk and the stack's background work is done before
    # the phase, not during it (docs/benchmarks.md, "Settling before each phase")
    progress(f"  {name}: {await asyncio.to_thread(quiesce)}")
    probes.begin(name)
    began = time.time()
    lat = await open_loop(target, collector, rate=rate, duration=seconds,
                          session_for=lambda i: sessions[rng.randrange(len(sessions))])
    progress(f"  {name}: p50 {lat.p50:.1f} ms p99 {lat.p99:.1f} ms max {lat.max:.0f} ms "
             f"(n={len(lat.samples_ms)}, lost {lat.lost}, failed {lat.errors}; p99 with "
             f"failures at their failure time {p99_all(lat):.0f} ms)")
    progress(f"    seconds with a request over {STALL_MS:g} ms: {lat.slow_seconds(STALL_MS)} "
             f"(the phase began at {began:.1f}, wall clock)")
    probes.end(name)
    lat.steal_cores = probes.cpu.last_steal
    return lat


TOUCH_CLIENTS = 16  # connections of the unmeasured closed loop that touches the rest


async def touch_all(target: Target, collector: Collector, sessions: list[str],
                    clients: int = TOUCH_CLIENTS) -> int:
    """One request to each of ``sessions`` through the product, unmeasured: a closed loop of
    ``clients`` connections (as fast as answers come back, so never past saturation). Waits
    (bounded) until each request's Item is on the topic. Returns the requests that failed."""
    todo = iter(sessions)
    tokens: list[int] = []
    failed = 0
    done = 0

    async def worker() -> None:
        nonlocal failed, done
        http = RawHttp(target.base_url)
        try:
            for sid in todo:
                n = next(target.counter)
                if await post_ok(http, f"/v1/sessions/{sid}/events", n):
                    tokens.append(n)
                else:
                    failed += 1
                done += 1
                if done % 20_000 == 0:
                    progress(f"    … {done:,} of {len(sessions):,} Sessions touched")
        finally:
            http.close()

    await asyncio.gather(*(worker() for _ in range(clients)))
    return failed + await items_arrived(collector, tokens, 30)


async def _first_touch(name: str, target: Target, collector: Collector, rate: float,
                       seconds: float, fresh: list[str], probes: Probes) -> tuple[Latency, int]:
    """The phase's Sessions the product has not seen yet (bulk-loaded straight into the store,
    as after a restart): the first request to each, at the phase's rate for at most
    ``seconds`` (every request a first touch, none measured twice), measured; then every
    other one touched once, unmeasured (``touch_all``). Returns the measured phase and the
    unmeasured requests that failed."""
    order = list(fresh)
    random.Random(name).shuffle(order)
    n = min(len(order), int(seconds * rate))
    measured, rest = order[:n], order[n:]
    progress(f"  {name}: {await asyncio.to_thread(quiesce)}")
    probes.begin(name)
    lat = await open_loop(target, collector, rate=rate, duration=n / rate, warmup=0,
                          session_for=measured.__getitem__)
    progress(f"  {name}: p50 {lat.p50:.1f} ms p99 {lat.p99:.1f} ms max {lat.max:.0f} ms "
             f"(n={len(lat.samples_ms)}, lost {lat.lost}, failed {lat.errors})")
    probes.end(name)
    lat.steal_cores = probes.cpu.last_steal
    t0 = time.monotonic()
    failed = await touch_all(target, collector, rest) if rest else 0
    progress(f"  {name}: the other {len(rest):,} touched once, unmeasured, in "
             f"{time.monotonic() - t0:.1f}s ({failed} failed)")
    return lat, failed


TIMINGS = bool(os.environ.get("BENCH_TIMINGS"))  # the product's await timings per phase


@dataclass
class Probes:
    """What the case notes around each measured phase: the cores each process used (``cpu``)
    and, with ``BENCH_TIMINGS=1``, the product's await timings — ``server`` is signalled to
    print the timings gathered since its last report to its log
    (``serve_product.report_timings``), reports numbered as the product numbers them."""

    cpu: CpuSampler
    server: Server | None
    reports: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def begin(self, name: str) -> None:
        self.cpu.phase()  # the preflight's and the fill's seconds are not the phase's
        self._timings(f"before {name}")

    def end(self, name: str) -> None:
        progress(f"    {self.cpu.phase()}")
        self._timings(name)

    def _timings(self, what: str) -> None:
        if self.server is not None:
            self.server.proc.send_signal(signal.SIGUSR1)
            progress(f"    timings report {next(self.reports)} in the product's log: {what}")


def _nth(sessions: list[str], i: int) -> str:
    return sessions[i % len(sessions)]


WARM_UP_S = 20.0  # unmeasured traffic before the first phase (+ open_loop's 2 s lead-in, twice)
WARM_UP_SESSIONS = 100


async def _warm_up(target: Target, collector: Collector, fill: Filler, rate: float,
                   seconds: float = WARM_UP_S, timeout_s: float = 300) -> None:
    """Wait until the product answers one request end to end (a cold broker can take minutes
    to give the product's consumer groups a coordinator), then send ``seconds`` of the phases'
    traffic, unmeasured, to Sessions of their own (one of them alone, then all): the first
    phase (the ratios' baseline) must not carry the start-up — a just-started product, broker
    code and topics first used — which would flatter every larger phase against it."""
    warm = [await fill.session(None, 1) for _ in range(WARM_UP_SESSIONS)]
    await fill.flush()
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await preflight(Target(target.base_url, warm[:1], target.counter), collector)
            break
        except (RuntimeError, TimeoutError) as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the product never answered: {exc}") from exc
            progress(f"  warm-up: not answering yet ({str(exc)[:60]}); retrying")
            await asyncio.sleep(2)
    for sessions in (warm[:1], warm):
        lat = await open_loop(target, collector, rate=rate, duration=seconds / 2,
                              session_for=functools.partial(_nth, sessions))
        progress(f"  warm-up ({len(sessions)} Session{'s' if len(sessions) > 1 else ''}, "
                 f"unmeasured): p50 {lat.p50:.1f} ms p99 {lat.p99:.1f} ms, failed {lat.errors}")


def sizes_for(quick: bool) -> tuple[int, ...]:
    """Stored Items at each phase, in one Session and (separately) across Sessions."""
    if os.environ.get("BENCH_GROWTH_SIZES"):  # diagnostics: e.g. "1000,100000"
        return tuple(int(x) for x in os.environ["BENCH_GROWTH_SIZES"].split(","))
    return (1_000, 10_000) if quick else (1_000, 100_000, 1_000_000)


@dataclass
class FillSnapshot:
    """The store after the largest size's fill, kept for the next repeats (``--repeat``): the
    first repeat fills it and copies FerretDB's SQLite directory (the store stopped) to
    ``path``; each later repeat copies it back into its own freshly started stack instead of
    filling 10⁶ Items again. It holds that repeat's database (``tag``) as it stood right before
    its largest phases — the bulk fill and what the product wrote in the smaller phases — so a
    later repeat measures the largest phases on the same Sessions (``one``, ``across``, the
    first ``touched`` of which had been touched)."""

    path: Path | None = None
    tag: str = ""
    one: str = ""
    across: list[str] = field(default_factory=list)
    touched: int = 0
    written: int = 0
    size: int = 0

    def remove(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None


def _store_dir(infra: Infra) -> Path | None:
    """FerretDB's SQLite directory of a private stack; None when the store cannot be copied
    (an external store, or the PostgreSQL backend)."""
    stack = infra.stack
    if stack is None or stack.external_mongo:
        return None
    opts = stack.options()
    if opts.store_backend != "sqlite":
        return None
    return opts.state.root / "ferretdb" / "data"


def _copy_store(src: Path, dst: Path) -> float:
    t0 = time.monotonic()
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    return time.monotonic() - t0


def _mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


@dataclass
class Product:
    """The product server of one segment of the case, with what tails and samples it."""

    tag: str
    port: int
    server: Server
    collector: Collector
    cpu: CpuSampler
    probes: Probes


async def _start_product(infra: Infra, tag: str) -> Product:
    port = free_port()
    await prepare_topics(infra, tag)
    server = start_server("product", "bench.serve_product", ["--timings"] if TIMINGS else [],
                          infra.env(tag, SESSION_CORE_HTTP_PORT=str(port)), LOGS / "product.log")
    collector = Collector(infra.bootstrap, topics_for(infra.settings(tag)).session_items)
    await collector.start()
    cpu = CpuSampler({"product": server.proc.pid, **stack_pids(infra.mongodb_uri),
                      "bench": os.getpid()}).start()
    return Product(tag, port, server, collector, cpu, Probes(cpu, server if TIMINGS else None))


async def _stop_product(p: Product, csv_name: str) -> None:
    p.cpu.stop()
    p.cpu.write_csv(LOGS / csv_name)
    progress(f"  cpu per second: {LOGS / csv_name}")
    await p.collector.stop()
    p.server.stop()


async def _measure_size(name: str, size: int, p: Product, target: Target, rate: float,
                        seconds: float, one: str, across: list[str], touched: int,
                        out: dict[str, Latency], touch_failed: dict[int, int]) -> None:
    out[f"{size}_one"] = await _phase(f"{size:,} Items, one Session", target, p.collector,
                                      rate, seconds, [one], p.probes)
    first, touch_failed[size] = await _first_touch(
        f"{size:,} Items, first touch of {len(across) - touched:,} new Sessions",
        target, p.collector, rate, seconds, across[touched:], p.probes)
    out[f"{size}_first"] = first
    out[f"{size}_across"] = await _phase(
        f"{name} across {len(across):,} Sessions", target, p.collector, rate, seconds, across,
        p.probes)


async def _run(infra: Infra, quick: bool, rate: float, touch_failed: dict[int, int],
               snapshot: FillSnapshot | None = None) -> dict[str, Latency]:
    """The smaller sizes on one product process; then, for the largest size, the product and
    the store are stopped, the store's files kept (first repeat) or put back from the first
    repeat's copy (``snapshot``), both started again, the product warmed up again and every
    Session it had seen before touched again, and the largest size measured."""
    tag = new_tag("grow")
    per = 10
    seconds = float(os.environ.get("BENCH_GROWTH_SECONDS") or (6.0 if quick else 20.0))
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(infra.mongodb_uri)
    out: dict[str, Latency] = {}
    sizes = sizes_for(quick)
    *smaller, largest = sizes
    store = _store_dir(infra)
    reuse = snapshot is not None and snapshot.path is not None and snapshot.size == largest \
        and store is not None
    p = await _start_product(infra, tag)
    running = True
    try:
        fill = Filler(client[tag])
        target = Target(f"http://127.0.0.1:{p.port}", [])
        await _warm_up(target, p.collector, fill, rate, min(WARM_UP_S, seconds))
        one: str | None = None
        in_one = 0
        across: list[str] = []
        touched = 0
        for size in [*smaller, *([] if reuse else [largest])]:
            t0 = time.monotonic()
            one = await fill.session(one, size - in_one)
            in_one = size
            target = Target(target.base_url, [one], target.counter)
            k = 0
            touched = len(across)
            while len(across) * per < size:
                # the Session's last Item comes from its first touch through the product
                across.append(await fill.session(None, per - 1))
                k += 1
                if k % 10_000 == 0:
                    progress(f"  … {len(across)} Sessions")
            await fill.flush()
            dt = time.monotonic() - t0
            progress(f"  bulk-loaded to {size:,} Items in one Session and {len(across):,} "
                     f"Sessions of {per - 1} (+1 at their first touch): {fill.written:,} Items "
                     f"stored in all, this fill {dt:.1f}s")
            if size != largest:
                await _measure_size(f"{size:,} Items", size, p, target, rate, seconds, one,
                                    across, touched, out, touch_failed)
        # the largest size: product and store restarted around the store's copy
        running = False
        await _stop_product(p, "cpu.csv")
        assert infra.stack is not None or store is None
        if store is not None and infra.stack is not None:
            # a pooled connection to the stopped store fails its next operation: a new client
            await client.close()
            infra.stack.stop("ferretdb")
            if reuse:
                assert snapshot is not None and snapshot.path is not None
                took = _copy_store(snapshot.path, store)
                tag, one, across, touched = (snapshot.tag, snapshot.one, list(snapshot.across),
                                             snapshot.touched)
                progress(f"  the store of the first repeat's {largest:,}-Item fill copied in "
                         f"({_mb(store):,.0f} MB in {took:.1f}s; {snapshot.written:,} Items "
                         f"bulk-loaded in all); not filled again")
            elif snapshot is not None:
                snapshot.path = Path(tempfile.mkdtemp(prefix="session-core-bench-fill-"))
                took = _copy_store(store, snapshot.path)
                assert one is not None
                snapshot.tag, snapshot.one, snapshot.across, snapshot.touched = (
                    tag, one, list(across), touched)
                snapshot.written, snapshot.size = fill.written, largest
                progress(f"  the store after the {largest:,}-Item fill kept for the next "
                         f"repeats ({_mb(snapshot.path):,.0f} MB copied in {took:.1f}s)")
            infra.stack.start("ferretdb")
            client = AsyncMongoClient(infra.mongodb_uri)
        assert one is not None
        p = await _start_product(infra, tag)
        running = True
        fill = Filler(client[tag])
        target = Target(f"http://127.0.0.1:{p.port}", [one], target.counter)
        await _warm_up(target, p.collector, fill, rate, min(WARM_UP_S, seconds))
        t0 = time.monotonic()
        failed = await touch_all(target, p.collector, across[:touched]) if touched else 0
        touch_failed[-1] = failed
        progress(f"  the {touched:,} Sessions touched before the restart touched again, "
                 f"unmeasured, in {time.monotonic() - t0:.1f}s ({failed} failed)")
        await _measure_size(f"{largest:,} Items", largest, p, target, rate, seconds, one,
                            across, touched, out, touch_failed)
        return out
    finally:
        if running:
            await _stop_product(p, "cpu-largest.csv")
        await client.close()


def stalled(small: Latency, size: int) -> str:
    """Why a growth ratio over this small phase is not valid: a request in it took over
    ``STALL_MS`` (a disk or broker stall, a queue) — its p99 then measures the stall, and the
    ratio flatters every larger phase. Empty when the small phase ran clean."""
    if not any(ms > STALL_MS for _, ms in small.series):
        return ""
    return (f"the {size:,}-Item phase (the baseline) held requests over {STALL_MS:g} ms, at "
            f"{small.slow_seconds(STALL_MS)}")


def _cores(x: float | None) -> str:
    return "not read" if x is None else f"{x:.2f}"


def p99_all(lat: Latency) -> float:
    """p99 over successes and failures (a failure counts at the time its 504 came back — a
    lower bound of its latency); +inf when nothing came back at all."""
    values = lat.with_failures
    return percentile(values, 99) if values else float("inf")


@dataclass(frozen=True)
class Kind:
    """One growth figure: its phases (``kind``), its name's suffix, the small phase it is set
    against (``base``) and whether the unmeasured first touches' failures count against it."""

    kind: str
    what: str
    suffix: str
    base: str
    touches_count: bool = False


KINDS = (
    Kind("one", "one Session", "_one", "one"),
    Kind("across", "across Sessions (10 each), every Session touched once before the phase",
         "_across", "across", touches_count=True),
    # set against the small phase's steady traffic (every Session warm), not its own 100
    # first touches: a p99 of 100 samples, sent without a lead-in, is a loose and high base
    # that would flatter every ratio over it
    Kind("first", "across Sessions, the first request to each Session (bulk-loaded, never "
         "seen by the product, as after a restart), against the small phase's steady across "
         "traffic", "_first_touch", "across"),
)


def run(run_: Run, infra: Infra, quick: bool = False, rate: float | None = None,
        snapshot: FillSnapshot | None = None) -> None:
    r = max(2.0, (rate / 2) if rate else 10.0)
    progress(f"  open loop at {r:.1f}/s in every phase")
    touch_failed: dict[int, int] = {}
    lat = asyncio.run(_run(infra, quick, r, touch_failed, snapshot))
    small, *larger = sizes_for(quick)
    for k in KINDS:
        s = lat[f"{small}_{k.base}"]
        for size in larger:
            b = lat[f"{size}_{k.kind}"]
            # the steady phase's Sessions were touched by the unmeasured loop: its failures
            # leave some of them cold, so they count against the figure
            touch = touch_failed.get(size, 0) + touch_failed.get(small, 0) + (
                touch_failed.get(-1, 0) if size == larger[-1] else 0) if k.touches_count else 0
            name = f"3_growth_p99{k.suffix}" + ("_1m" if size >= 1_000_000 else "")
            run_.add(Result(
                name, p99_all(b), p99_all(s), "<= 1.5" if size >= 1_000_000 else "<= 1.2", "ms",
                f"p99 HTTP→Item, {k.what}: {size:,} Items vs {small:,}"
                f"{' (quick)' if quick else ''}; open loop {r:.1f}/s in every phase; failed "
                f"requests (504) count at their failure time; large: ok={len(b.samples_ms)} "
                f"failed={b.errors} lost={b.lost} p50(ok) {b.p50:.1f}; small: "
                f"ok={len(s.samples_ms)} failed={s.errors} lost={s.lost} p50(ok) {s.p50:.1f}; "
                + (f"unmeasured first touches failed: {touch}; " if k.touches_count else "")
                + "journal and Sessions grown alike; store bulk-loaded directly"
                + (f"; product and store restarted before the {size:,}-Item phases"
                   + (" (the store copied from the first repeat's fill)"
                      if snapshot is not None and snapshot.size == size
                      and run_.repeat > 1 else "")
                   if size == larger[-1] else "")
                + f"; cores stolen "
                f"by the hypervisor, mean over the phase: large {_cores(b.steal_cores)}, "
                f"small {_cores(s.steal_cores)}",
                failed=b.errors + b.lost + s.errors + s.lost + touch,
                invalid=stalled(s, small)))
    plot_latencies(BENCH_DIR / "growth_latency.png", f"HTTP → Item latency at {r:.0f}/s",
                   {k: v.samples_ms for k, v in lat.items()})

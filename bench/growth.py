"""Case 3 — growth: p99 HTTP → Item latency with 1 000 vs 100 000 Items already stored, (A) in
one Session and (B) across Sessions (10 Items each: 100 Sessions small, 10 000 large).

The store is pre-filled directly, in exactly the shape storage writes: each filler record goes
through the domain's own ``decide_message`` and ``StorageRepository.journal_doc``, then Items
via ``storecodec.item_doc``, journal entries as ``write()`` stores them, and Sessions as
``SessionState.to_doc()`` + ``storecodec.pack`` — so the journal, Items and Sessions grow as they
would have. Phases run in one database, growing it: small-one, small-across, (fill), large-one,
large-across. Traffic is an open loop at the same rate in every phase (half the pipeline's
saturated rate when case 2 ran, else 10/s). Target: p99(large) ≤ 1.2 × p99(small).
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
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
from bench.load import Collector, Latency, Target, open_loop, start_server
from bench.pipeline import preflight
from services.storage.repository import StorageRepository
from shared.domain.sessions import SessionState, decide_message
from shared.ids import new_id
from shared.kafka import now_rfc3339
from shared.storecodec import dumps, item_doc, pack, unpack
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
            self.items += [item_doc(it, f"{jdoc['_id']}#{it['sequence']}")
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


async def _phase(name: str, target: Target, collector: Collector, rate: float, seconds: float,
                 sessions: list[str]) -> Latency:
    rng = random.Random(name)
    try:
        await preflight(Target(target.base_url, sessions[:1], target.counter), collector)
    except (RuntimeError, TimeoutError) as exc:  # a 504 here is a finding, not a crash
        progress(f"  {name}: preflight failed ({str(exc)[:80]}); measuring anyway")
    lat = await open_loop(target, collector, rate=rate, duration=seconds,
                          session_for=lambda i: sessions[rng.randrange(len(sessions))])
    progress(f"  {name}: p50 {lat.p50:.1f} ms p99 {lat.p99:.1f} ms max {lat.max:.0f} ms "
             f"(n={len(lat.samples_ms)}, lost {lat.lost}, failed {lat.errors}; p99 with "
             f"failures at their failure time {p99_all(lat):.0f} ms)")
    return lat


async def _run(infra: Infra, quick: bool, rate: float) -> dict[str, Latency]:
    tag = new_tag("grow")
    port = free_port()
    settings = infra.settings(tag)
    large, per = (10_000, 10) if quick else (100_000, 10)
    seconds = 6.0 if quick else 20.0
    await prepare_topics(infra, tag)
    server = start_server("product", "bench.serve_product", [],
                          infra.env(tag, SESSION_CORE_HTTP_PORT=str(port)), LOGS / "product.log")
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(infra.mongodb_uri)
    collector = Collector(infra.bootstrap, topics_for(settings).session_items)
    out: dict[str, Latency] = {}
    try:
        db = client[tag]
        fill = Filler(db)
        await collector.start()
        base = f"http://127.0.0.1:{port}"
        t0 = time.monotonic()
        one = await fill.session(None, 1_000)
        across = [await fill.session(None, per) for _ in range(1_000 // per)]
        await fill.flush()
        progress(f"  filled 2 000 Items (1 Session of 1 000, {len(across)} of {per}) in "
                 f"{time.monotonic() - t0:.1f}s")
        target = Target(base, [one])
        out["small_one"] = await _phase("small, one Session (1 000 Items)", target,
                                        collector, rate, seconds, [one])
        out["small_across"] = await _phase(
            f"small, across {len(across)} Sessions (1 000 Items)", target, collector, rate,
            seconds, across)
        t0 = time.monotonic()
        await fill.session(one, large - 1_000)
        n_more = (large - 1_000) // per
        for k in range(n_more):
            across.append(await fill.session(None, per))
            if k % 1000 == 999:
                progress(f"  … {len(across)} Sessions")
        await fill.flush()
        progress(f"  filled {fill.written} Items in all ({large} in one Session, "
                 f"{len(across)} Sessions of {per}) in {time.monotonic() - t0:.1f}s")
        out["large_one"] = await _phase(f"large, one Session ({large} Items)", target,
                                        collector, rate, seconds, [one])
        out["large_across"] = await _phase(
            f"large, across {len(across)} Sessions ({len(across) * per} Items)", target,
            collector, rate, seconds, across)
        return out
    finally:
        await collector.stop()
        server.stop()
        await client.close()


def p99_all(lat: Latency) -> float:
    """p99 over successes and failures (a failure counts at the time its 504 came back — a
    lower bound of its latency); +inf when nothing came back at all."""
    values = lat.with_failures
    return percentile(values, 99) if values else float("inf")


def run(run_: Run, infra: Infra, quick: bool = False, rate: float | None = None) -> None:
    r = max(2.0, (rate / 2) if rate else 10.0)
    progress(f"  open loop at {r:.1f}/s in every phase")
    lat = asyncio.run(_run(infra, quick, r))
    large = "10 000 (quick)" if quick else "100 000"
    for kind, what in (("one", "one Session"), ("across", "across Sessions (10 each)")):
        s, b = lat[f"small_{kind}"], lat[f"large_{kind}"]
        run_.add(Result(f"3_growth_p99_{kind}", p99_all(b), p99_all(s), "<= 1.2", "ms",
                        f"p99 HTTP→Item, {what}: {large} Items vs 1 000; open loop {r:.1f}/s; "
                        f"failed requests (504) count at their failure time; large: "
                        f"ok={len(b.samples_ms)} failed={b.errors} lost={b.lost} p50(ok) "
                        f"{b.p50:.1f}; small: ok={len(s.samples_ms)} failed={s.errors} "
                        f"lost={s.lost} p50(ok) {s.p50:.1f}; journal and Sessions grown alike"))
    plot_latencies(BENCH_DIR / "growth_latency.png", f"HTTP → Item latency at {r:.0f}/s",
                   {k: v.samples_ms for k, v in lat.items()})

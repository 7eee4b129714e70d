"""``python -m bench.serve_product [--profile OUT]`` — the product's hot path in one process:
storage (``session.admitted`` → store → ``session.items`` + reply) and admission (uvicorn on
``SESSION_CORE_HTTP_PORT``), configured from the environment exactly as the services are. The
dispatcher and the receipt tracker are not started: nothing on the HTTP → Item path waits for
them. Prints ``READY`` when both are up; stops on SIGTERM/SIGINT. With ``--profile`` the whole
process runs under pyinstrument and the report is written to OUT (.txt and .html)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import itertools
import os
import signal
import sys
import time
from typing import Any

from services.admission.app import AdmissionService
from services.storage.app import StorageService
from shared import eventloop
from shared.logging import configure_logging
from shared.service import run_until_stopped
from shared.settings import get_settings

TIMINGS: dict[str, list[float]] = {}
# BENCH_BATCH_TRACE=1: one stderr line per storage batch (wall time, records, ms, process CPU,
# and how long its oldest and newest record had been in the broker's log when it came, ms)
TRACE_BATCHES = bool(os.environ.get("BENCH_BATCH_TRACE"))
REPORTS = itertools.count(1)  # report_timings numbers its reports
LAG_TASKS: set[asyncio.Task[None]] = set()  # watch_loop_lag (held: a task needs a reference)


def _timed(owner: Any, name: str, label: str) -> None:
    """Wrap ``owner.name`` (a coroutine function) to add its wall time to ``TIMINGS[label]``."""
    fn = getattr(owner, name, None)
    if fn is None:  # the code under test changed; time what exists
        return

    @functools.wraps(fn)  # FastStream reads the handler's signature
    async def wrapper(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        trace = label == "storage.on_batch" and TRACE_BATCHES
        arrived = time.time() if trace else 0.0
        try:
            return await fn(*a, **kw)
        finally:
            TIMINGS.setdefault(label, []).append(time.perf_counter() - t0)
            if trace:  # time, records, ms, cpu s, lags
                raw = getattr(kw.get("msg", a[-1]), "raw_message", ())
                raws = raw if isinstance(raw, tuple) else (raw,)
                # how long its oldest / newest record had been in the log when the batch came
                stamps = [r.timestamp / 1000 for r in raws if getattr(r, "timestamp", None)]
                lag = (f" {1000 * (arrived - min(stamps)):.1f} {1000 * (arrived - max(stamps)):.1f}"
                       if stamps else "")
                took = 1000 * (time.perf_counter() - t0)
                print(f"BATCH {time.time():.3f} {len(raws)} {took:.1f} "
                      f"{time.process_time():.3f}{lag}", file=sys.stderr, flush=True)

    setattr(owner, name, wrapper)


def install_timings() -> None:
    """Wall time per await on the hot path (diagnostics for the profile; monkeypatched here,
    the services are not changed)."""
    from services.admission import core as admission_core
    from services.storage import app as storage_app
    from services.storage.batch import BatchWriter
    from services.storage.handler import StorageHandler
    from services.storage.repository import StorageRepository

    for n in ("journal", "journaled", "sessions", "roll_forward", "idempotency", "calls",
              "commit", "apply_rest", "apply", "_advance_sessions"):
        _timed(StorageRepository, n, f"storage.repo.{n}")
    _timed(StorageService, "on_batch", "storage.on_batch")
    _timed(StorageHandler, "handle", "storage.handler.handle")
    _timed(BatchWriter, "_hand_over", "storage.batch._hand_over")
    from services.storage import repository as storage_repository
    _timed(storage_repository, "insert_in_order", "storage.repo.insert_in_order")
    _timed(storage_repository, "insert_ignoring_duplicates", "storage.repo.insert_ignoring_dup")
    _timed(storage_app, "publish", "storage.publish (each)")
    _timed(admission_core.Admission, "add_event", "admission.add_event (whole)")
    _timed(admission_core.Admission, "_hand_over", "admission._hand_over (publish+wait)")
    _timed(admission_core.Admission, "_session_profile", "admission._session_profile")


def report_timings() -> None:
    """Print the timings gathered since the last report, then start afresh (SIGUSR1 asks for
    one: the growth case asks at each phase's start and end)."""
    lines = [f"timings report {next(REPORTS)} at {time.time():.3f}: wall time per awaited step "
             "(count, total s, mean ms, max ms):"]
    for label, ts in sorted(TIMINGS.items()):
        lines.append(f"  {label:42s} {len(ts):6d} {sum(ts):9.2f} {1000 * sum(ts) / len(ts):9.2f}"
                     f" {1000 * max(ts):9.1f}")
    print("\n".join(lines), file=sys.stderr, flush=True)
    TIMINGS.clear()


async def serve(timings: bool = False) -> None:
    """Storage and admission until SIGTERM/SIGINT (``shared.service.run_until_stopped``, as
    every service runs); READY once both are up and the heap is settled. With ``timings``,
    SIGUSR1 prints the timings gathered so far."""
    settings = get_settings()
    configure_logging(settings.log_level, "json", service="bench-product")
    storage = StorageService(settings)
    admission = AdmissionService(settings)

    async def start() -> None:
        await storage.start()
        await admission.start()
        if timings:
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, report_timings)
        if os.environ.get("BENCH_LOOP_LAG"):
            LAG_TASKS.add(asyncio.create_task(watch_loop_lag()))

    async def stop() -> None:
        await admission.stop()
        await storage.stop()
        if TIMINGS:
            report_timings()

    await run_until_stopped(start, stop, ready=lambda: print("READY", flush=True))


def log_gc_pauses() -> None:
    """With ``BENCH_GC_LOG=1``: every full (generation 2) collection, and any other longer than
    20 ms, printed to stderr (the server's log) with its pause and the objects tracked."""
    if not os.environ.get("BENCH_GC_LOG"):
        return
    began = [0.0]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
            return
        pause = time.perf_counter() - began[0]
        if info["generation"] == 2 or pause > 0.02:
            print(f"GC gen{info['generation']} {1000 * pause:.0f}ms "
                  f"objects={len(gc.get_objects())}", file=sys.stderr, flush=True)

    gc.callbacks.append(callback)


async def watch_loop_lag(threshold_ms: float = 50.0) -> None:
    """With ``BENCH_LOOP_LAG=1``: every time the event loop wakes a 10 ms sleep more than
    ``threshold_ms`` late (something held the loop: a long synchronous step, a collection),
    ``LOOPLAG <epoch s> <late ms>`` on stderr (the server's log)."""
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(0.01)
        late = (loop.time() - before - 0.01) * 1000
        if late > threshold_ms:
            print(f"LOOPLAG {time.time():.3f} {late:.0f}", file=sys.stderr, flush=True)


def main() -> None:
    log_gc_pauses()
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default=None)
    ap.add_argument("--timings", action="store_true")
    args = ap.parse_args()
    timings = bool(args.timings or args.profile)
    if timings:
        install_timings()
    if not args.profile:
        eventloop.run(serve(timings))
        return
    from pyinstrument import Profiler

    profiler: Any = Profiler(interval=0.002, async_mode="disabled")
    profiler.start()
    try:
        eventloop.run(serve(timings))
    finally:
        profiler.stop()
        with open(args.profile + ".txt", "w") as f:
            f.write(profiler.output_text(unicode=True, color=False, show_all=False))
        with open(args.profile + ".html", "w") as f:
            f.write(profiler.output_html())
        if profiler.last_session is not None:  # for python -m bench.summarize_profile
            profiler.last_session.save(args.profile + ".pyisession")
        print(f"profile written to {args.profile}.txt/.html/.pyisession", file=sys.stderr)


if __name__ == "__main__":
    main()

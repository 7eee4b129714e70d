"""Case 5 — the real-harness Runtime's overhead per Turn against the bare harness.

Both sides run the real ``codex app-server`` against the same in-process scripted model server
(every request answered "ok" at once), one thread, Turns one after another:

* **bare**: a minimal JSON-RPC client (``services/runtime/live/codex_rpc.py``) — ``turn/start``
  written → ``turn/completed`` read;
* **runtime**: a ``start`` delivery published on ``runtime.deliveries`` → the Runtime
  (``RuntimeService`` with the real Codex engine, in this process) → its ``turn/completed``
  observation read back from ``runtime.observations``: Kafka both ways, the driver, the
  envelope.

Figure: median Runtime Turn / median bare Turn (target ≤ 1.2). The first Turn of each side (the
process start) is not counted."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.common import Infra, Result, Run, new_tag, progress

DEBUG = bool(__import__("os").environ.get("BENCH_HARNESS_DEBUG"))
TEXT = [{"type": "text", "text": "bench: say ok"}]


async def _bare(model_url: str, turns: int) -> list[float]:
    from services.runtime.live import DEFAULT_FUNCTIONS
    from services.runtime.live.codex_rpc import BareCodex

    out: list[float] = []
    async with BareCodex(model_url + "/v1", list(DEFAULT_FUNCTIONS)) as c:
        for i in range(turns + 1):
            start = len(c.printed)
            t0 = time.perf_counter()
            tid = await c.turn(TEXT)
            while not any(m.get("method") == "turn/completed"
                          and (m.get("params") or {}).get("turn", {}).get("id") == tid
                          for m in c.printed[start:]):
                async with c._arrived:
                    await c._arrived.wait()
            if i:
                out.append(time.perf_counter() - t0)
    return out


async def _runtime(infra: Infra, model_url: str, turns: int) -> list[float]:
    from bench.common import prepare_topics
    from services.runtime.app import RuntimeConfig, RuntimeService
    from services.runtime.conformance import Wire
    from services.runtime.live import LiveOptions
    from services.runtime.live.codex import CodexLive
    from shared.domain.delivery import message_delivery
    from shared.ids import new_id

    tag = new_tag("harness")
    await prepare_topics(infra, tag)  # leaders before the Runtime starts (docs/benchmarks.md)
    settings = infra.settings(tag)
    config = RuntimeConfig(runtime_id=new_id("rt"), harness="codex")
    live = CodexLive(LiveOptions(runtime_id=config.runtime_id, harness="codex",
                                 model_base_url=model_url + "/v1"))
    svc = RuntimeService(settings, config, live=live)
    await svc.start()
    wire = Wire(settings)
    await wire.start()
    out: list[float] = []
    try:
        sid = new_id("session")
        q = wire.listen(sid)
        await asyncio.wait_for(svc.ready.wait(), 60)
        for i in range(turns + 1):
            turn_id = new_id("turn")
            record: dict[str, Any] = message_delivery(
                delivery_id=new_id("dlv"), runtime_id=config.runtime_id, session_id=sid,
                turn_id=turn_id, kind="start",
                messages=[{"role": "user", "content": [{"type": "input_text",
                                                        "text": TEXT[0]["text"]}]}])
            t0 = time.perf_counter()
            await wire.deliver(record)
            while True:
                obs = await asyncio.wait_for(q.get(), 120)
                native = obs.get("native") or {}
                if DEBUG:
                    progress(f"    {time.perf_counter() - t0:.3f} {native.get('method')}")
                if obs.get("turn_id") == turn_id and native.get("method") == "turn/completed":
                    break
            if i:
                out.append(time.perf_counter() - t0)
    finally:
        await wire.stop()
        await svc.stop()
    return out


Timer = Callable[..., Awaitable[list[float]]]


def measure(run_: Run, infra: Infra, quick: bool, *, case: str, harness: str, bare: Timer,
            runtime: Timer, what: str) -> None:
    """The overhead case for one harness: the same number of Turns on the bare binary and
    through the Runtime, against one scripted model server; the medians' ratio is the figure."""
    from services.modelserver.server import ModelServer

    turns = 5 if quick else 20
    ms = ModelServer().start()
    try:
        progress(f"  bare {harness}: {turns} Turns")
        b_all = asyncio.run(bare(ms.url, turns))
        progress(f"  Runtime (--engine real) over Kafka: {turns} Turns")
        r_all = asyncio.run(runtime(infra, ms.url, turns))
    finally:
        ms.stop()
    b, r = statistics.median(b_all), statistics.median(r_all)
    run_.add(Result(case, r * 1000, b * 1000, "<= 1.2", "ms",
                    f"median Turn through the Runtime ({what}) vs the bare {harness} on the "
                    f"same scripted model; {turns} Turns each; bare p50 {b * 1000:.0f} ms max "
                    f"{max(b_all) * 1000:.0f} ms, runtime p50 {r * 1000:.0f} ms max "
                    f"{max(r_all) * 1000:.0f} ms"))


def run(run_: Run, infra: Infra, quick: bool = False) -> None:
    measure(run_, infra, quick, case="5_codex_runtime_turn_overhead",
            harness="codex app-server", bare=_bare, runtime=_runtime,
            what="Kafka in and out, live driver")

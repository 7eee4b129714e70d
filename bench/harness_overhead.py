"""Case 5 — the real-harness Runtime's overhead per Turn against the bare harness.

Both sides run the real ``codex app-server`` against the same scripted model server (its own
process, every request answered "ok" at once), one Turn at a time:

* **bare**: a minimal JSON-RPC client (``runtimes/codex/rpc.py``) — ``turn/start``
  written → ``turn/completed`` read;
* **runtime**: a ``start`` delivery published on ``runtime.deliveries`` → the Runtime
  (``RuntimeService`` with the real Codex engine, in this process) → its ``turn/completed``
  observation read back from ``runtime.observations``: Kafka both ways, the driver, the
  envelope.

The two sides run **paired**: both processes are up for the whole case and their Turns
alternate (bare, runtime, runtime, bare, …), so a change in the machine's load (the shared
machine's load moves by 2× within a minute) hits both sides alike instead of whichever phase
ran later. Figure: median Runtime Turn / median bare Turn (target ≤ 1.2); the per-pair ratios'
median is in the notes. The first Turn of each side (the process start) is not counted."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from bench.common import Infra, Result, Run, new_tag, progress
from shared import eventloop

DEBUG = bool(__import__("os").environ.get("BENCH_HARNESS_DEBUG"))
TEXT = [{"type": "text", "text": "bench: say ok"}]

BROKER_WARM_UP = 5000  # produce → consume round trips before the Turns (``warm_broker``)
TURNS = 40  # measured paired Turns a side (20 left the median ±0.1 run to run)
WARM_UP_PAIRS = 20  # unmeasured paired Turns before the measured ones (``paired``)
TurnFn = Callable[[], Awaitable[float]]  # one Turn; returns its wall time in seconds


@contextlib.asynccontextmanager
async def bare_codex(model_url: str, _infra: Infra) -> AsyncIterator[TurnFn]:
    from runtimes.codex.rpc import BareCodex
    from runtimes.live import DEFAULT_FUNCTIONS

    async with BareCodex(model_url + "/v1", list(DEFAULT_FUNCTIONS)) as c:
        async def turn() -> float:
            start = len(c.printed)
            t0 = time.perf_counter()
            tid = await c.turn(TEXT)
            while not any(m.get("method") == "turn/completed"
                          and (m.get("params") or {}).get("turn", {}).get("id") == tid
                          for m in c.printed[start:]):
                async with c._arrived:
                    await c._arrived.wait()
            return time.perf_counter() - t0

        yield turn


@contextlib.asynccontextmanager
async def runtime_over_kafka(infra: Infra, harness: str, live: Any,
                             is_end: Callable[[dict[str, Any]], bool]) -> AsyncIterator[TurnFn]:
    """A Runtime (in this process) driving ``live``; a Turn is a ``start`` delivery published
    on Kafka until the observation ``is_end`` accepts is read back from Kafka."""
    from bench.common import prepare_topics
    from runtimes.app import RuntimeConfig, RuntimeService
    from runtimes.conformance import Wire
    from shared.domain.wire import message_delivery
    from shared.ids import new_id
    from shared.kafka import encode, make_producer
    from shared.logging import configure_logging

    # logs as the Runtime writes them in production (INFO, JSON), not structlog's default
    # (every DEBUG line, rendered for a console) in the timed path
    configure_logging("INFO", "json", service="runtime")
    tag = new_tag(f"harness-{harness}")
    await prepare_topics(infra, tag)  # leaders first (docs/benchmarks.md, "Method")
    settings = infra.settings(tag)
    config = RuntimeConfig(runtime_id=live.options.runtime_id, harness=harness)
    svc = RuntimeService(settings, config, live=live)
    await svc.start()
    wire = Wire(settings)  # Core's side: reads the observations back
    await wire.start()
    # The delivery is published as Core's dispatcher does (acks=all, idempotent) but without
    # its 2 ms linger: the figure is the Runtime's overhead, and the dispatcher's batching
    # delay is Core's (docs/benchmarks.md, case 5).
    publisher = make_producer(settings, "bench-dispatcher", linger_ms=0)
    await publisher.start()
    try:
        sid = new_id("session")
        q = wire.listen(sid)
        await asyncio.wait_for(svc.ready.wait(), 60)

        async def turn() -> float:
            turn_id = new_id("turn")
            record: dict[str, Any] = message_delivery(
                delivery_id=new_id("dlv"), runtime_id=config.runtime_id, session_id=sid,
                turn_id=turn_id, kind="start",
                messages=[{"role": "user", "content": [{"type": "input_text",
                                                        "text": TEXT[0]["text"]}]}])
            t0 = time.perf_counter()
            await publisher.send_and_wait(wire.topics.runtime_deliveries, encode(record),
                                          key=config.runtime_id.encode())
            while True:
                obs = await asyncio.wait_for(q.get(), 120)
                if DEBUG:
                    native = obs.get("native") or {}
                    progress(f"    {time.perf_counter() - t0:.3f} "
                             f"{native.get('method') or native.get('type')}")
                if obs.get("turn_id") == turn_id and is_end(obs.get("native") or {}):
                    return time.perf_counter() - t0

        yield turn
    finally:
        await publisher.stop()
        await wire.stop()
        await svc.stop()


@contextlib.asynccontextmanager
async def runtime_codex(model_url: str, infra: Infra) -> AsyncIterator[TurnFn]:
    from runtimes.codex.live import CodexLive
    from runtimes.live import LiveOptions
    from shared.ids import new_id

    live = CodexLive(LiveOptions(runtime_id=new_id("rt"), harness="codex",
                                 model_base_url=model_url + "/v1"))
    async with runtime_over_kafka(infra, "codex", live,
                                  lambda n: n.get("method") == "turn/completed") as turn:
        yield turn


Side = Callable[[str, Infra], contextlib.AbstractAsyncContextManager[TurnFn]]


async def paired(model_url: str, infra: Infra, bare: Side, runtime: Side, turns: int,
                 warm_up: int = 1) -> tuple[list[float], list[float]]:
    """``turns`` Turns on each side, alternating which side goes first in each pair, after
    ``warm_up`` unmeasured pairs (process start, first model request, and a broker that has
    just started: its JVM runs the request path interpreted for its first thousands of
    requests, which a running deployment's broker does not)."""
    b_all: list[float] = []
    r_all: list[float] = []
    async with bare(model_url, infra) as b_turn, runtime(model_url, infra) as r_turn:
        for _ in range(warm_up):
            await b_turn()
            await r_turn()
        for i in range(turns):
            if i % 2 == 0:
                b_all.append(await b_turn())
                r_all.append(await r_turn())
            else:
                r_all.append(await r_turn())
                b_all.append(await b_turn())
    return b_all, r_all


@contextlib.contextmanager
def model_server_process() -> Iterator[str]:
    """The scripted model server as its own process (``python -m scripted_model``), as a
    provider is in production: in a thread of this process it would compete for the GIL with
    the Runtime's own work and charge that to the model's answer time."""
    from deploy.local.stack.base import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "scripted_model", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # ready when it accepts a connection (bounded; it starts in ~1 s)
            with contextlib.suppress(OSError), socket.create_connection(
                    ("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the scripted model server did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


async def warm_broker(infra: Infra, rounds: int) -> float:
    """``rounds`` produce → consume round trips on a scratch topic (acks=all, idempotent, no
    linger; a long-polling consumer: the Runtime's paths), before any measured Turn: a broker
    that has just started runs its request path interpreted for its first thousands of
    requests (a standalone ``--case harness`` measured 1.3–1.5× against 1.1–1.2× after the
    other cases). Returns the median of the last 100 round trips (seconds)."""
    from aiokafka import AIOKafkaConsumer

    from shared.kafka import make_producer

    tag = new_tag("warm")
    topic = f"{tag}.ping"
    settings = infra.settings(tag)
    producer = make_producer(settings, "bench-warm", linger_ms=0)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=infra.bootstrap,
                                auto_offset_reset="earliest", fetch_max_wait_ms=500)
    await producer.start()
    await consumer.start()
    trips: list[float] = []
    try:
        await producer.send_and_wait(topic, b"first")  # creates the topic
        await asyncio.wait_for(consumer.getone(), 60)
        for _ in range(rounds):
            t0 = time.perf_counter()
            await producer.send_and_wait(topic, b"ping")
            await asyncio.wait_for(consumer.getone(), 30)
            trips.append(time.perf_counter() - t0)
    finally:
        await consumer.stop()
        await producer.stop()
    return statistics.median(trips[-100:])


def warm(infra: Infra, rounds: int) -> None:
    """``warm_broker``, and a progress line with its figure."""
    trip = asyncio.run(warm_broker(infra, rounds))
    progress(f"  broker warmed: {rounds} round trips, the last 100's median "
             f"{trip * 1000:.2f} ms")


def measure(run_: Run, infra: Infra, quick: bool, *, case: str, harness: str, bare: Side,
            runtime: Side, what: str) -> None:
    """The overhead case for one harness: the same number of Turns on the bare binary and
    through the Runtime, paired, against one scripted model server; the medians' ratio is the
    figure."""
    turns, warm_up = (6, 3) if quick else (TURNS, WARM_UP_PAIRS)
    warm(infra, 300 if quick else BROKER_WARM_UP)
    with model_server_process() as url:
        progress(f"  bare {harness} and the Runtime (--engine real) over Kafka: {turns} paired "
                 f"Turns after {warm_up} unmeasured pairs")
        b_all, r_all = eventloop.run(paired(url, infra, bare, runtime, turns, warm_up))
    b, r = statistics.median(b_all), statistics.median(r_all)
    pair = statistics.median(x / y for x, y in zip(r_all, b_all, strict=True))
    run_.add(Result(case, r * 1000, b * 1000, "<= 1.2", "ms",
                    f"median Turn through the Runtime ({what}) vs the bare {harness} on the "
                    f"same scripted model; {turns} paired Turns each; bare p50 {b * 1000:.0f} "
                    f"ms max {max(b_all) * 1000:.0f} ms, runtime p50 {r * 1000:.0f} ms max "
                    f"{max(r_all) * 1000:.0f} ms; median per-pair ratio {pair:.2f}"))


def run(run_: Run, infra: Infra, quick: bool = False) -> None:
    measure(run_, infra, quick, case="5_codex_runtime_turn_overhead",
            harness="codex app-server", bare=bare_codex, runtime=runtime_codex,
            what="Kafka in and out, live driver")

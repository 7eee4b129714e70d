"""Where a Runtime Turn's milliseconds go (case 5's set-up, timestamps per step):
``PYTHONPATH=$PWD .venv/bin/python -m bench.harness_profile {codex|claude} [TURNS]``.

Runs case 5's paired Turns (``bench.harness_overhead.paired``: the bare binary and the Runtime on
one scripted model server, the stack from ``KAFKA_BOOTSTRAP_SERVERS`` / ``MONGODB_URI``) with
the Kafka clients and the drivers wrapped to note, per Runtime Turn, from the delivery's publish:
acked, consumed by the Runtime, handed to the driver, written to the harness's stdin, the Turn's
end record enqueued / sent / acked / read back; each observation's send and ack; and (Codex)
every line the binary printed, for the bare Turns too — so the harness's own pace inside the
Runtime can be compared with the bare one. Prints medians; writes nothing. A diagnostic, not a
figure: the wrappers cost a little themselves (docs/harnesses.md, Bench)."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

import bench.harness_overhead as ho
import bench.harness_overhead_claude as hoc
from bench.common import Infra
from runtimes.claude.live import ClaudeLive
from runtimes.codex import rpc
from runtimes.codex.live import CodexLive
from runtimes.deliveries import DeliveryLoop
from runtimes.outbox import ObservationOutbox

T: dict[str, Any] = {}  # the current Runtime Turn: step → perf_counter; "_ev": [(t, event)]
B: dict[str, Any] = {}  # the current bare Turn
ROWS: list[dict[str, Any]] = []
BARE: list[tuple[float, dict[str, Any]]] = []


def mark(step: str) -> None:
    T.setdefault(step, time.perf_counter())


def event(d: dict[str, Any], what: str) -> None:
    d.setdefault("_ev", []).append((time.perf_counter(), what))


def is_end(raw: bytes) -> bool:
    return b'"turn/completed"' in raw or b'"type":"result"' in raw


def wrap() -> None:
    getmany, send = AIOKafkaConsumer.getmany, AIOKafkaProducer.send

    async def getmany_(self: Any, *a: Any, **kw: Any) -> Any:
        got = await getmany(self, *a, **kw)
        for tp, recs in got.items():
            if tp.topic.endswith("runtime.deliveries") and recs:
                mark("3 consumed by the Runtime")
            if tp.topic.endswith("runtime.observations"):
                for r in recs:
                    event(T, f"read back {len(r.value)} bytes")
                    if is_end(r.value):
                        mark("9 end read back")
        return got

    async def send_(self: Any, topic: str, value: bytes, key: Any = None, *a: Any,
                    **kw: Any) -> Any:
        if topic.endswith("runtime.deliveries"):
            T["_t0"] = time.perf_counter()
        fut = await send(self, topic, value, key, *a, **kw)
        t = T
        if topic.endswith("runtime.deliveries"):
            fut.add_done_callback(lambda _f: t.setdefault("2 delivery acked",
                                                          time.perf_counter()))
        if topic.endswith("runtime.observations"):
            native = json.loads(value).get("native") or {}
            name = native.get("method") or native.get("type")
            event(t, f"send {name}")
            fut.add_done_callback(lambda _f: event(t, f"ack {name}"))
            if is_end(value):
                mark("7 end sent")
                fut.add_done_callback(lambda _f: t.setdefault("8 end acked",
                                                              time.perf_counter()))
        return fut

    AIOKafkaConsumer.getmany = getmany_
    AIOKafkaProducer.send = send_

    handle_raw, enqueue = DeliveryLoop.handle_raw, ObservationOutbox.enqueue

    async def handle_raw_(self: DeliveryLoop, r: Any) -> int:
        mark("4 handed to the driver")
        return await handle_raw(self, r)

    def enqueue_(self: ObservationOutbox, emits: list[Any]) -> None:
        if any(is_end(json.dumps(e.record.get("native") or {}, separators=(",", ":")).encode())
               for e in emits):
            mark("6 end enqueued")
        enqueue(self, emits)

    DeliveryLoop.handle_raw = handle_raw_  # type: ignore[method-assign]
    ObservationOutbox.enqueue = enqueue_  # type: ignore[method-assign]

    dispatch, cwrite, lwrite = CodexLive._dispatch, CodexLive._write, ClaudeLive._write

    def dispatch_(self: CodexLive, proc: Any, m: dict[str, Any]) -> None:
        event(T, f"line {m.get('method') or 'reply'}")
        dispatch(self, proc, m)

    def cwrite_(self: CodexLive, proc: Any, m: dict[str, Any]) -> None:
        if m.get("method") == "turn/start":
            mark("5 written to stdin")
        cwrite(self, proc, m)

    async def lwrite_(self: ClaudeLive, s: Any, record: dict[str, Any]) -> None:
        if record.get("type") == "user":
            mark("5 written to stdin")
        await lwrite(self, s, record)

    CodexLive._dispatch = dispatch_  # type: ignore[method-assign,assignment]
    CodexLive._write = cwrite_  # type: ignore[method-assign,assignment]
    ClaudeLive._write = lwrite_  # type: ignore[method-assign]

    class Printed(list[dict[str, Any]]):
        def append(self, m: dict[str, Any]) -> None:
            event(B, f"line {m.get('method') or 'reply'}")
            super().append(m)

    init = rpc.BareCodex.__init__

    def init_(self: rpc.BareCodex, *a: Any, **kw: Any) -> None:
        init(self, *a, **kw)
        self.printed = Printed()

    rpc.BareCodex.__init__ = init_  # type: ignore[method-assign]


async def paired(model_url: str, infra: Infra, bare: ho.Side, runtime: ho.Side,
                 turns: int) -> tuple[list[float], list[float]]:
    b_all: list[float] = []
    r_all: list[float] = []
    async with bare(model_url, infra) as b_turn, runtime(model_url, infra) as r_turn:
        await b_turn()
        await r_turn()
        for _ in range(turns):
            B.clear()
            t0 = time.perf_counter()
            b_all.append(await b_turn())
            BARE.append((t0, dict(B)))
            T.clear()
            r_all.append(await r_turn())
            ROWS.append(dict(T))
    return b_all, r_all


def firsts(events: list[tuple[float, str]], t0: float) -> dict[str, float]:
    """Each event's n-th occurrence (``name#n``) → ms after ``t0``."""
    out: dict[str, float] = {}
    seen: dict[str, int] = defaultdict(int)
    for t, e in sorted(events):
        seen[e] += 1
        out.setdefault(f"{e}#{seen[e]}", (t - t0) * 1000)
    return out


def main() -> None:
    harness = sys.argv[1] if len(sys.argv) > 1 else "codex"
    turns = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    wrap()
    infra = Infra(os.environ["KAFKA_BOOTSTRAP_SERVERS"], os.environ["MONGODB_URI"], "external")
    sides = {"codex": (ho.bare_codex, ho.runtime_codex),
             "claude": (hoc.bare_claude, hoc.runtime_claude)}[harness]
    ho.warm(infra, ho.BROKER_WARM_UP)  # as case 5 does
    with ho.model_server_process() as url:
        b, r = asyncio.run(paired(url, infra, *sides, turns))
    print(f"{turns} paired Turns: bare median {statistics.median(b) * 1000:.1f} ms, "
          f"runtime median {statistics.median(r) * 1000:.1f} ms")
    print("Runtime Turn, ms after the delivery's publish (median):")
    for step in sorted({k for row in ROWS for k in row if not k.startswith("_")}):
        vals = [(row[step] - row["_t0"]) * 1000 for row in ROWS if step in row]
        print(f"  {step:28s} {statistics.median(vals):7.1f}  (n={len(vals)})")
    if harness == "codex":
        print("lines the binary printed, ms after turn/start was written (median): "
              "runtime / bare")
        rt = [firsts(row.get("_ev", []), row["5 written to stdin"]) for row in ROWS
              if "5 written to stdin" in row]
        bare = [firsts(ev.get("_ev", []), t0) for t0, ev in BARE]
        for label in (x for x in rt[0] if x.startswith("line")):
            rv = [f[label] for f in rt if label in f]
            bv = [f[label] for f in bare if label in f]
            if rv and bv:
                print(f"  {label:40s} {statistics.median(rv):7.1f} {statistics.median(bv):7.1f}")
    median_turn = sorted(ROWS, key=lambda row: row.get("9 end read back", 0.0))[len(ROWS) // 2]
    print("the median Runtime Turn's observations, ms after the delivery's publish:")
    for t, e in sorted(median_turn.get("_ev", [])):
        if not e.startswith("line"):
            print(f"  {(t - median_turn['_t0']) * 1000:7.1f} {e}")


if __name__ == "__main__":
    main()

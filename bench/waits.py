"""``python -m bench.waits [--n 1000]`` — memory per waiting request.

Starts the product server (``bench/serve_product.py``: storage + admission in one process; no
dispatcher, so no Turn ever ends and every wait holds until it is released), creates ``n``
Sessions, sends each one event without wait (the control: what admitting and storing an event
costs), reads the server's RSS (``/proc/<pid>/status`` VmRSS), opens ``n`` concurrent
``POST …/events?wait=true`` requests (one connection each, one per Session), waits until the
server's ``session_core_waits_active`` gauge (admitted and waiting) reads ``n`` (opened in steps
of 50, each step admitted before the next), reads the RSS again, and reports
(RSS during − RSS before) / n. The server is then stopped with SIGTERM: every wait answers 202
at once (the shutdown rule), which the script checks. Appends one row to bench/results.csv
unless ``--no-csv``. Uses the stack named by ``KAFKA_BOOTSTRAP_SERVERS``/``MONGODB_URI`` or a
private one."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.common import Result, Run, free_port, infrastructure, new_tag, prepare_topics, progress
from bench.load import Server, start_server

RAMP = 50
MESSAGE = {"type": "agent.session.input.message",
           "input": [{"role": "user", "content": [{"type": "input_text", "text": "wait"}]}]}


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def waits_active(c: httpx.AsyncClient) -> int:
    for line in (await c.get("/metrics")).text.splitlines():
        if line.startswith("session_core_waits_active "):
            return int(float(line.split()[1]))
    return 0


async def measure(base: str, server: Server, n: int, control: list[int]
                  ) -> tuple[int, int, Counter[int]]:
    limits = httpx.Limits(max_connections=n + 20, max_keepalive_connections=n + 20)
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(60, read=None),
                                 limits=limits) as c:
        sem = asyncio.Semaphore(32)

        async def create(i: int) -> str:
            async with sem:
                r = await c.post("/v1/sessions", json={"harness": "codex", "placement": "none",
                                                       "input": f"session {i}"})
                assert r.status_code == 201, r.text
                return str(r.json()["id"])

        progress(f"  creating {n} Sessions")
        sids = await asyncio.gather(*(create(i) for i in range(n)))
        await asyncio.sleep(3)
        start_rss = statistics.median([rss_bytes(server.proc.pid) for _ in range(5)])

        async def send(sid: str) -> None:
            async with sem:
                r = await c.post(f"/v1/sessions/{sid}/events", json=MESSAGE)
                assert r.status_code == 202, r.text

        # control: the same event per Session without wait (admission + storage of one event)
        progress(f"  RSS after creating: {start_rss / 1e6:.1f} MB; {n} events without wait")
        await asyncio.gather(*(send(sid) for sid in sids))
        await asyncio.sleep(3)
        before = statistics.median([rss_bytes(server.proc.pid) for _ in range(5)])
        control.append(int(before - start_rss))
        progress(f"  RSS before: {before / 1e6:.1f} MB; opening {n} waits")
        # in steps of RAMP, each admitted before the next (storage answers within its budget)
        tasks: list[asyncio.Task[httpx.Response]] = []
        deadline = time.monotonic() + 600
        for start in range(0, n, RAMP):
            tasks += [asyncio.create_task(c.post(
                f"/v1/sessions/{sid}/events", json=MESSAGE,
                params={"wait": "true", "timeout_ms": "600000"}))
                for sid in sids[start:start + RAMP]]
            while (active := await waits_active(c)) < len(tasks):
                if time.monotonic() > deadline or any(t.done() for t in tasks):
                    raise RuntimeError(f"only {active} of {len(tasks)} waits became active")
                await asyncio.sleep(0.2)
        await asyncio.sleep(3)
        samples = []
        for _ in range(5):
            samples.append(rss_bytes(server.proc.pid))
            await asyncio.sleep(0.2)
        during = statistics.median(samples)
        progress(f"  RSS with {n} waits: {during / 1e6:.1f} MB")
        server.proc.terminate()  # waits answer 202 at once when the replica stops
        done = await asyncio.gather(*tasks, return_exceptions=True)
        statuses = Counter(r.status_code if isinstance(r, httpx.Response) else -1 for r in done)
        return int(before), int(during), statuses


async def main_async(n: int, no_csv: bool) -> int:
    run = Run()
    with infrastructure() as infra:
        tag = new_tag("waits")
        await prepare_topics(infra, tag)
        port = free_port()
        env = infra.env(tag, SESSION_CORE_HTTP_PORT=str(port), SESSION_CORE_LOG_LEVEL="WARNING",
                        SESSION_CORE_MAX_CONCURRENT_WAITS=str(n + 10),
                        SESSION_CORE_MAX_CONCURRENT_WAITS_PER_TENANT=str(n + 10),
                        SESSION_CORE_MAX_INFLIGHT_PER_TENANT=str(2 * n + 50))
        log = Path(tempfile.mkdtemp(prefix="bench-waits-")) / "product.log"
        server = start_server("product", "bench.serve_product", [], env, log)
        try:
            control: list[int] = []
            before, during, statuses = await measure(f"http://127.0.0.1:{port}", server, n,
                                                     control)
        finally:
            server.stop()
    per_wait = (during - before) / n
    progress(f"  answers after SIGTERM: {dict(statuses)}")
    run.add(Result("waits: RSS per event without wait (control)", control[0] / n, None, "info",
                   "bytes", f"n={n}; the same event admitted and stored, no wait"))
    run.add(Result("waits: RSS per waiting request", per_wait, None, "info", "bytes",
                   f"n={n}; RSS before {before} B, during {during} B; answers {dict(statuses)}; "
                   "includes admitting and storing the event (see the control)"))
    print(run.table())
    if not no_csv:
        run.write_csv()
    return 0 if statuses.get(202, 0) == n else 1


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.waits", description=__doc__)
    ap.add_argument("--n", type=int, default=1000, help="concurrent waits (default 1000)")
    ap.add_argument("--no-csv", action="store_true")
    args = ap.parse_args()
    raise SystemExit(asyncio.run(main_async(args.n, args.no_csv)))


if __name__ == "__main__":
    main()

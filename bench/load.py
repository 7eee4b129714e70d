"""Load generation over real HTTP and the Item collector on ``session.items``, shared by the
pipeline and growth cases; plus the server subprocesses they drive.

Every request carries a token ``bk<n>x`` at the start of its text; the collector reads the Item
topic from its end (no consumer group), finds the token in the raw record bytes (no JSON parse,
so the collector costs the same for product and baseline) and stamps its arrival. Latency is
Item arrival minus the moment the request was sent (both ``time.monotonic()`` in this process).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer

from bench.common import REPO, Spread, percentile, progress
from shared.kafka import assign_all

TOKEN = re.compile(rb"bk(\d+)x")
TEXT_TAIL = " — a benchmark message of ordinary length, about one short sentence."


def message_body(n: int) -> bytes:
    return (b'{"type":"agent.session.input.message","input":[{"role":"user","content":'
            b'[{"type":"input_text","text":"bk' + str(n).encode() + b"x" + TEXT_TAIL.encode()
            + b'"}]}]}')


class Collector:
    """Tails an Item topic from its end; ``arrived[n]`` = monotonic arrival of token n."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.arrived: dict[int, float] = {}
        self.consumer: AIOKafkaConsumer | None = None
        self.task: asyncio.Task[None] | None = None
        self.waiters: dict[int, asyncio.Future[float]] = {}

    async def start(self) -> None:
        c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=10,
                             max_partition_fetch_bytes=16 * 1024 * 1024)
        await c.start()
        if not await assign_all(c, self.topic, at_end=True):
            raise RuntimeError(f"topic {self.topic} has no partitions")
        self.consumer = c
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        assert self.consumer is not None
        while True:
            batches = await self.consumer.getmany(timeout_ms=100, max_records=5000)
            now = time.monotonic()
            for records in batches.values():
                for r in records:
                    m = TOKEN.search(r.value or b"")
                    if m is None:
                        continue
                    n = int(m.group(1))
                    self.arrived.setdefault(n, now)
                    fut = self.waiters.pop(n, None)
                    if fut is not None and not fut.done():
                        fut.set_result(now)

    async def wait(self, n: int, timeout: float = 60) -> float:  # noqa: ASYNC109
        if n in self.arrived:
            return self.arrived[n]
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.waiters[n] = fut
        return await asyncio.wait_for(fut, timeout)

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self.consumer:
            await self.consumer.stop()


@dataclass
class Target:
    """Where to send: base URL and the Session ids to spread requests over."""

    base_url: str
    sessions: list[str]
    counter: Iterator[int] = field(default_factory=lambda: iter(range(1, 1 << 62)))

    def path(self, i: int) -> str:
        return f"/v1/sessions/{self.sessions[i % len(self.sessions)]}/events"


@dataclass
class Throughput:
    rate: Spread  # Items/s over the measurement windows
    errors: int
    statuses: dict[int, int]
    sent: int
    # Items that arrived during the windows, and ``saturate``'s ``mark()`` at their start and end
    window_items: int = 0
    marks: tuple[Any, Any] | None = None


async def saturate(target: Target, collector: Collector, *, clients: int, warmup: float,
                   windows: int, window: float, mark: Callable[[], Any] | None = None
                   ) -> Throughput:
    """Closed loop: ``clients`` httpx clients post as fast as answers come back. The rate is
    Items seen on the Item topic per second, in ``windows`` consecutive windows after warmup.
    ``mark`` (e.g. the processes' CPU times) is called when the first window begins and when
    the last ends."""
    stop = asyncio.Event()
    statuses: dict[int, int] = {}
    sent = 0

    async def worker(k: int) -> None:
        nonlocal sent
        async with httpx.AsyncClient(base_url=target.base_url, timeout=60) as http:
            i = k
            while not stop.is_set():
                n = next(target.counter)
                try:
                    r = await http.post(target.path(i), content=message_body(n),
                                        headers={"content-type": "application/json"})
                    statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                except httpx.HTTPError:
                    statuses[-1] = statuses.get(-1, 0) + 1
                sent += 1
                i += clients

    tasks = [asyncio.create_task(worker(k)) for k in range(clients)]
    await asyncio.sleep(warmup)
    rates = []
    first = mark() if mark else None
    start = len(collector.arrived)
    for _ in range(windows):
        c0, t0 = len(collector.arrived), time.monotonic()
        await asyncio.sleep(window)
        rates.append((len(collector.arrived) - c0) / (time.monotonic() - t0))
    items = len(collector.arrived) - start
    last = mark() if mark else None
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    errors = sum(v for k, v in statuses.items() if k < 200 or k >= 300)
    return Throughput(Spread.of(rates), errors, statuses, sent, items,
                      (first, last) if mark else None)


@dataclass
class Latency:
    samples_ms: list[float]
    lost: int
    offered_rate: float
    errors: int
    failed_ms: list[float] = field(default_factory=list)  # time until a non-2xx answer
    # (seconds from the loop's start to the request's due time, latency ms), in send order:
    # where in the phase the slow requests were (a stall, a warm-up, a steady queue)
    series: list[tuple[float, float]] = field(default_factory=list)
    # cores the hypervisor gave to other guests, mean over the phase (bench/cpu.py), if read
    steal_cores: float | None = None

    @property
    def with_failures(self) -> list[float]:
        """Samples plus failed requests counted at their failure time (a lower bound)."""
        return self.samples_ms + self.failed_ms

    @property
    def p50(self) -> float:
        return percentile(self.samples_ms, 50)

    @property
    def p99(self) -> float:
        return percentile(self.samples_ms, 99)

    @property
    def max(self) -> float:
        return max(self.samples_ms, default=float("nan"))

    def slow_seconds(self, over_ms: float) -> str:
        """The seconds of the loop (from its start, by due time) holding a request slower
        than ``over_ms``: ``"7s: 12 (max 640 ms)"`` per second, or ``"none"``."""
        per: dict[int, list[float]] = {}
        for at, ms in self.series:
            if ms > over_ms:
                per.setdefault(int(at), []).append(ms)
        return ", ".join(f"{s}s: {len(v)} (max {max(v):.0f} ms)"
                         for s, v in sorted(per.items())) or "none"


IDLE_S = 4.0  # a connection idle longer is opened again: under uvicorn's keep-alive of 5 s


class RawHttp:
    """One keep-alive HTTP/1.1 connection that POSTs a JSON body and returns the status.

    The open loop's client. httpx costs ~1 ms of CPU a request, on the two cores the product
    runs on, and its pool (httpcore 1.0 ``_assign_requests_to_connections``) walks every
    queued request times every connection each time a request enters or leaves: an open loop
    that falls behind once — a few slow answers — then spends a whole core on its own queue and
    never catches up. Seen: the client at 93–100 % CPU, the product at 50 %, answering in
    ≤ 200 ms while the "measured" p99 grew to 35 s. This one writes the request and reads the
    status line, headers and body (Content-Length or chunked)."""

    def __init__(self, base_url: str, idle_s: float | None = None) -> None:
        url = httpx.URL(base_url)
        self.host, self.port = url.host, url.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.idle_s = IDLE_S if idle_s is None else idle_s
        self.last = 0.0  # when the last answer was read

    async def post(self, path: str, body: bytes) -> int:
        if self.writer is not None and time.monotonic() - self.last > self.idle_s:
            # the server closes a keep-alive connection idle for its timeout (uvicorn: 5 s); a
            # request written into it gets no answer and was counted as failed — at a low rate
            # with many connections every connection idles that long (43/s over 256: ~6 s)
            self.close()
        if self.reader is None or self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.writer.write(head.encode() + body)
        r = self.reader
        status = int((await r.readline()).split()[1])
        length, chunked, close = 0, False, False
        while (line := await r.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value
            elif name == b"connection":
                close = value == b"close"
        if chunked:
            while (size := int((await r.readline()).split(b";")[0], 16)) > 0:
                await r.readexactly(size + 2)
            await r.readline()
        else:
            await r.readexactly(length)
        self.last = time.monotonic()
        if close:
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def post_ok(http: RawHttp, path: str, n: int) -> bool:
    """POST the benchmark message with token ``n``; whether it was answered 2xx (a broken
    connection, a malformed answer or 60 s without one: not, and the connection is closed)."""
    try:
        async with asyncio.timeout(60):
            return 200 <= await http.post(path, message_body(n)) < 300
    except (OSError, EOFError, ValueError, IndexError, TimeoutError):
        http.close()
        return False


async def items_arrived(collector: Collector, tokens: Iterable[int], timeout_s: float) -> int:
    """Wait (at most ``timeout_s``) until the Items of ``tokens`` are on the topic; how many
    are not."""
    wanted = list(tokens)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(n not in collector.arrived for n in wanted):  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    return sum(n not in collector.arrived for n in wanted)


async def open_loop(target: Target, collector: Collector, *, rate: float, duration: float,
                    warmup: float = 2.0, pool: int = 256,
                    session_for: Callable[[int], str] | None = None) -> Latency:
    """Open loop at ``rate`` requests/s (evenly spaced) for ``warmup + duration`` seconds;
    latency (due time → Item on the topic) of the requests sent after the warmup. ``pool``
    connections (``RawHttp``), each its own worker; a request waits in this process's queue
    when all are busy, and that wait counts in its latency (no coordinated omission)."""
    sends: dict[int, float] = {}
    failed: list[float] = []
    errors = 0
    queue: asyncio.Queue[tuple[int, int, float] | None] = asyncio.Queue()

    async def worker() -> None:
        nonlocal errors
        http = RawHttp(target.base_url)
        try:
            while (job := await queue.get()) is not None:
                n, i, t = job
                path = (f"/v1/sessions/{session_for(i)}/events" if session_for
                        else target.path(i))
                ok = await post_ok(http, path, n)
                if not ok:
                    errors += 1
                    if sends.pop(n, None) is not None:
                        failed.append((time.monotonic() - t) * 1000)
        finally:
            http.close()

    workers = [asyncio.create_task(worker()) for _ in range(pool)]
    start = time.monotonic()
    total = int((warmup + duration) * rate)
    for i in range(total):
        due = start + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        n = next(target.counter)
        t = time.monotonic()
        if i >= warmup * rate:
            sends[n] = t
        queue.put_nowait((n, i, t))
    for _ in workers:
        queue.put_nowait(None)
    await asyncio.gather(*workers, return_exceptions=True)
    await items_arrived(collector, sends, 20)  # the stragglers' Items
    series = [(t - start, (collector.arrived[n] - t) * 1000) for n, t in sends.items()
              if n in collector.arrived]
    lost = len(sends) - len(series)
    return Latency([ms for _, ms in series], lost, rate, errors, failed, series)


# ------------------------------------------------------------------------------------------
# server subprocesses
# ------------------------------------------------------------------------------------------


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    log: Path
    name: str

    def stop(self, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_server(name: str, module: str, args: list[str], env: dict[str, str], log: Path,
                 timeout: float = 120) -> Server:
    """``python -m <module> <args>``; ready when it prints ``READY`` on stdout."""
    out = log.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=out)
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    deadline = time.monotonic() + timeout
    buf = b""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited ({proc.returncode}); see {log}")
        chunk = proc.stdout.read()
        if chunk:
            buf += chunk
            if b"READY" in buf:
                progress(f"  {name} ready (pid {proc.pid}, log {log})")
                return Server(proc, log, name)
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{name} did not become ready in {timeout}s; see {log}")

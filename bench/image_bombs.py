"""Case 6 — image bombs from one tenant, the other tenant's reads (issue 62, part 2).

The product (``bench.serve_product``: admission + storage in one process, authentication on,
two tenants). Tenant B reads its Session (``GET /v1/sessions/{id}``) at a steady rate, first
alone (the baseline), then while tenant A sends, back to back on two connections, requests of
20 decompression bombs each — the issue's 8.3 MB request: 6324 × 6324 16-bit RGBA PNGs of
zeros, 311 KB each, 320 MB of scanlines each. Figures:

* ``6_bombs_b_get_p99``: B's GET p99 under the bombs against B's GET p99 alone; target ≤ 2.0
  (the issue's bound). ``failed`` counts B's GETs that were not 200 and A's requests that were
  not 413.
* ``6_bombs_rss_peak``: the peak RSS (``VmHWM``) of the product process and its children (the
  body parser) summed, against the chart's admission memory limit (512 MiB); target ≤ 1.0.
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from pathlib import Path

import httpx

from bench.common import (
    Infra,
    Result,
    Run,
    free_port,
    new_tag,
    percentile,
    prepare_topics,
    progress,
)
from bench.load import start_server
from shared.domain.tenancy import key_entry

LOGS = Path(tempfile.mkdtemp(prefix="session-core-bench-bombs-"))
GET_RATE = 50.0  # B's reads per second
CHART_MEMORY_LIMIT = 512 * 1024 * 1024
BOMB_SIDE = 6324


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def bomb_png(side: int = BOMB_SIDE) -> bytes:
    """A 16-bit RGBA PNG of zeros, ``side`` × ``side``, compressed row by row (the issue's bomb
    at the default side: ~311 KB, 320 MB of scanlines)."""
    row = bytes(1 + side * 8)
    z = zlib.compressobj(9)
    idat = b"".join(z.compress(row) for _ in range(side)) + z.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 16, 6, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat)
            + _chunk(b"IEND", b""))


def bomb_body(png: bytes, images: int = 20) -> bytes:
    part = {"type": "input_image", "image_url": "data:image/png;base64,"
            + base64.b64encode(png).decode()}
    return json.dumps({"harness": "codex", "placement": "none",
                       "input": [{"role": "user", "content": [part] * images}]}).encode()


async def _reads(client: httpx.AsyncClient, sid: str, seconds: float,
                 statuses: Counter[int]) -> list[float]:
    """B's GETs at ``GET_RATE`` for ``seconds`` (open loop: each at its planned time, each
    measured from then, so a stalled server shows as latency)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    lat: list[float] = []

    async def one(planned: float) -> None:
        r = await client.get(f"/v1/sessions/{sid}")
        statuses[r.status_code] += 1
        lat.append(loop.time() - planned)

    tasks = []
    n = int(seconds * GET_RATE)
    for i in range(n):
        planned = start + i / GET_RATE
        await asyncio.sleep(max(0.0, planned - loop.time()))
        tasks.append(asyncio.create_task(one(planned)))
    await asyncio.gather(*tasks)
    return lat


async def _bombs(client: httpx.AsyncClient, body: bytes, stop: asyncio.Event,
                 statuses: Counter[int]) -> None:
    while not stop.is_set():
        r = await client.post("/v1/sessions", content=body,
                              headers={"content-type": "application/json"})
        statuses[r.status_code] += 1


async def _sender(base: str, key: str, body: bytes) -> None:
    """Tenant A in a process of its own (``python -m bench.image_bombs BASE KEY``): two
    connections sending the bomb request back to back until stdin closes, then its statuses
    as one JSON line. In the measuring process, its 8.3 MB writes stalled the loop that times
    B's GETs, and the bench counted its own stalls as the server's."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    stop = asyncio.Event()
    statuses: Counter[int] = Counter()
    async with httpx.AsyncClient(base_url=base, timeout=120,
                                 headers={"Authorization": f"Bearer {key}"}) as a:
        senders = [asyncio.create_task(_bombs(a, body, stop, statuses)) for _ in range(2)]
        await reader.read()  # EOF: the measuring process is done
        stop.set()
        await asyncio.gather(*senders)
    print(json.dumps(statuses), flush=True)


def _hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _peak_rss(pid: int) -> int:
    """The peak RSS (``VmHWM``) of the product process and of its children (admission's body
    parser) summed: an upper bound of the container's peak, the peaks need not coincide."""
    children = [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
                for c in (task / "children").read_text().split()]
    return _hwm(pid) + sum(_hwm(c) for c in children)


async def _run(infra: Infra, quick: bool, profile: bool) -> tuple[
        list[float], list[float], Counter[int], Counter[int], int]:
    tag = new_tag("bombs")
    port = free_port()
    key_a, key_b = f"a-{uuid.uuid4().hex}", f"b-{uuid.uuid4().hex}"
    await prepare_topics(infra, tag)
    env = infra.env(tag, SESSION_CORE_HTTP_PORT=str(port), SESSION_CORE_AUTH_DISABLED="false",
                    SESSION_CORE_API_KEYS=f"{key_entry('tenantA', key_a)},"
                                          f"{key_entry('tenantB', key_b)}",
                    SESSION_CORE_MEMORY_LIMIT_BYTES=str(CHART_MEMORY_LIMIT))
    args = ["--profile", str(LOGS / "product-profile")] if profile else []
    server = start_server("product", "bench.serve_product", args, env, LOGS / "product.log")
    seconds = 5.0 if quick else 20.0
    body = bomb_body(bomb_png())
    progress(f"  bomb request: {len(body)} bytes, 20 images")
    base = f"http://127.0.0.1:{port}"
    b = httpx.AsyncClient(base_url=base, timeout=120, headers={"Authorization": f"Bearer {key_b}"})
    try:
        r = await b.post("/v1/sessions", json={"harness": "codex", "placement": "none",
                                               "input": "tenant B's Session"})
        r.raise_for_status()
        sid = r.json()["id"]
        b_statuses: Counter[int] = Counter()
        a_statuses: Counter[int] = Counter()
        await _reads(b, sid, 2.0, Counter())  # warm-up
        idle = await _reads(b, sid, seconds, b_statuses)
        sender = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.image_bombs", base, key_a,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert sender.stdin is not None
        await asyncio.sleep(1.0)  # its interpreter up and its first requests on the wire
        try:
            under = await _reads(b, sid, seconds, b_statuses)
        finally:
            sender.stdin.close()
            out, _ = await asyncio.wait_for(sender.communicate(), 180)
        a_statuses.update({int(k): n for k, n in json.loads(out).items()})
        return idle, under, b_statuses, a_statuses, _peak_rss(server.proc.pid)
    finally:
        await b.aclose()
        server.stop()


def run(run_: Run, infra: Infra, quick: bool = False, profile: bool = False) -> None:
    """With ``profile``, the product process runs under pyinstrument (its main thread, the event
    loop's: what keeps B's reads waiting) and writes ``product-profile.{txt,html,pyisession}``
    in ``LOGS``; the figures of a profiled run are not the product's."""
    t0 = time.monotonic()
    idle, under, b_statuses, a_statuses, rss = asyncio.run(_run(infra, quick, profile))
    p99_idle, p99_under = percentile(idle, 99) * 1000, percentile(under, 99) * 1000
    bad = sum(n for s, n in b_statuses.items() if s != 200)
    bad += sum(n for s, n in a_statuses.items() if s != 413)
    run_.add(Result(
        "6_bombs_b_get_p99", p99_under, p99_idle, "<= 2.0", "ms", failed=bad,
        notes=f"B GET p99 while A sends 20-bomb requests ({sum(a_statuses.values())} sent, "
              f"statuses {dict(a_statuses)}) vs B alone; B statuses {dict(b_statuses)}; "
              f"{GET_RATE:g}/s; p50 {percentile(under, 50) * 1000:.1f} / "
              f"{percentile(idle, 50) * 1000:.1f} ms"))
    run_.add(Result("6_bombs_rss_peak", rss / 2**20, CHART_MEMORY_LIMIT / 2**20, "<= 1.0", "MiB",
                    notes="the VmHWM of the product process and its children, summed, after "
                          "the bombs vs the chart's admission memory limit"))
    progress(f"  case 6 took {time.monotonic() - t0:.0f}s"
             + (f"; profile in {LOGS}/product-profile.txt" if profile else ""))


if __name__ == "__main__":
    asyncio.run(_sender(sys.argv[1], sys.argv[2], bomb_body(bomb_png())))

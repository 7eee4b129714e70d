"""What one store operation costs the store's own process: the local stack's FerretDB (with the
repo's patches, deploy/local/ferretdb/_overlay) against the same wrapper built on upstream
FerretDB's files alone, in alternating pairs on the same machine:

    PYTHONPATH=$PWD .venv/bin/python -m bench.store_server_cost [--pairs 3] [--ops 2000]

Each side runs its own FerretDB (fresh SQLite files, the wrapper's default synchronous level) and
the same workload, shaped as the product's store traffic: ``find_one`` by ``_id`` over a collection
of 10 000 Session-like documents, ``update_one`` ``$set`` by ``_id`` on them, and
``insert_many`` of 8 Item-like documents. The figure is the store process's CPU time
(``/proc/<pid>/stat`` utime + stime) per operation, median over the pairs; the ratio is patched
÷ upstream (lower is cheaper). A diagnostic for docs/decisions.md, "FerretDB's leak detector
and eager logging off", not a figure with a target."""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pymongo import MongoClient

from bench.cpu import process_cpu_s
from deploy.local.stack.base import FERRET_SRC, cache_dir, free_port
from deploy.local.stack.install import go_env, install_ferretdb, need_tool
from deploy.local.stack.probes import mongo_ready

SESSIONS = 10_000


def upstream_binary() -> Path:
    """The wrapper built against upstream FerretDB's module as downloaded (no overlay)."""
    out = cache_dir() / "bin" / "ferretdb-upstream-for-bench"
    subprocess.run([need_tool("go", "install Go 1.24+"), "build", "-trimpath", "-ldflags=-s -w",
                    "-o", str(out), "."], cwd=FERRET_SRC, env=go_env(), check=True)
    return out


def cpu_s(pid: int) -> float:
    got = process_cpu_s(pid)
    if got is None:
        raise RuntimeError(f"no CPU time for pid {pid}: the store exited")
    return got


@contextmanager
def store(binary: Path, flags: Sequence[str] = ()) -> Iterator[tuple[int, str]]:
    with tempfile.TemporaryDirectory(prefix="store-cost-") as d:
        port = free_port()
        proc = subprocess.Popen([str(binary), "-listen", f"127.0.0.1:{port}", "-sqlite-dir",
                                 f"{d}/data", "-log-level", "warn", *flags],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            uri = f"mongodb://127.0.0.1:{port}/"
            ready, deadline = mongo_ready("127.0.0.1", port), time.monotonic() + 30
            while not ready():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the store on port {port} did not answer in 30 s")
                time.sleep(0.1)
            yield proc.pid, uri
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def session_doc(i: int) -> dict[str, Any]:
    return {"_id": f"session_{i:032x}", "harness": "codex", "placement": "none",
            "tenant": "default", "version": 1, "last_sequence": 10, "open_calls": {},
            "state": "idle", "created_at": "2026-12-03T00:00:00Z"}


def item_docs(n: int) -> list[dict[str, Any]]:
    return [{"_id": uuid.uuid4().hex, "session_id": "s", "type": "message", "sequence": i,
             "content": [{"type": "input_text", "text": "hello world " * 10}],
             "created_at": "2026-12-03T00:00:00Z"} for i in range(n)]


def measure(binary: Path, ops: int) -> dict[str, float]:
    """CPU µs of the store per operation, for each kind."""
    out: dict[str, float] = {}
    with store(binary) as (pid, uri), MongoClient(uri) as client:
        db = client["cost"]
        sessions, items = db["sessions"], db["items"]
        sessions.insert_many([session_doc(i) for i in range(SESSIONS)])
        time.sleep(0.5)  # the wrapper's _id indexes (idindex.go, every 200 ms)
        step = 7919  # prime: the look-ups wander over the whole collection
        kinds: dict[str, Callable[[int], Any]] = {
            "find_one by _id": lambda k: sessions.find_one(
                {"_id": f"session_{(k * step) % SESSIONS:032x}"}),
            "update_one $set by _id": lambda k: sessions.update_one(
                {"_id": f"session_{(k * step) % SESSIONS:032x}"},
                {"$set": {"version": k, "last_sequence": k}}),
            "insert_many of 8": lambda _k: items.insert_many(item_docs(8)),
        }
        for kind, op in kinds.items():
            for k in range(50):  # warm
                op(k)
            c0 = cpu_s(pid)
            for k in range(ops):
                op(k)
            out[kind] = 1e6 * (cpu_s(pid) - c0) / ops
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--ops", type=int, default=2000, help="operations of each kind per side")
    args = ap.parse_args(argv)
    sides = {"patched": install_ferretdb(), "upstream": upstream_binary()}
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for i in range(args.pairs):
        order = list(sides) if i % 2 == 0 else list(reversed(sides))
        for name in order:
            runs[name].append(measure(sides[name], args.ops))
            print(f"pair {i + 1} {name}: " + ", ".join(
                f"{k} {v:.0f} µs" for k, v in runs[name][-1].items()), flush=True)
    print(f"\nstore CPU per operation, median of {args.pairs} pairs ({args.ops} ops each):")
    for kind in runs["patched"][0]:
        p = statistics.median(r[kind] for r in runs["patched"])
        u = statistics.median(r[kind] for r in runs["upstream"])
        print(f"  {kind:24s} patched {p:6.0f} µs  upstream {u:6.0f} µs  ratio {p / u:.3f}")


if __name__ == "__main__":
    main()

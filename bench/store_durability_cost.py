"""What the local store's durable default costs a write: the same wrapper binary run with
``-sqlite-synchronous full`` (the default: every commit's WAL fsynced before FerretDB answers)
and with ``off`` (the fast opt-in), in alternating pairs on the same machine:

    PYTHONPATH=$PWD .venv/bin/python -m bench.store_durability_cost [--pairs 3] [--ops 400]

Each side runs its own FerretDB on fresh SQLite files and the product's write shapes, one
command at a time from one client: ``insert_many`` of 8 Item-like documents (a storage batch's
Items, one transaction), ``update_one`` ``$set`` by ``_id`` on 10 000 Session-like documents, and
a ``bulk_write`` of 32 upserts of them (a round of storage's Session writer: FerretDB v1 runs
each statement of a bulk write as its own transaction, so each is a commit). Figures: wall-clock
latency per command, p50 and p99, median over the pairs; the ratio is full ÷ off. A diagnostic
for docs/local-stack.md ("The cost of synchronous=FULL"), not a figure with a target.

``make bench`` runs it as case 7 (``run``): one pair per repeat, each command kind's p50 as a row
``7_durability_…`` (value: full, baseline: off, target ``info``)."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pymongo import MongoClient, UpdateOne

from bench.common import Result, Run, percentile, progress
from bench.store_server_cost import SESSIONS, item_docs, session_doc, store
from deploy.local.stack.install import install_ferretdb

LEVELS = ("full", "off")


def measure(binary: Path, level: str, ops: int) -> dict[str, tuple[float, float]]:
    """(p50, p99) ms per command, for each kind."""
    out: dict[str, tuple[float, float]] = {}
    with store(binary, ["-sqlite-synchronous", level]) as (_pid, uri):
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        db = client["durability"]
        sessions, items = db["sessions"], db["items"]
        sessions.insert_many([session_doc(i) for i in range(SESSIONS)])
        time.sleep(0.5)  # the wrapper's _id indexes (idindex.go, every 200 ms)
        step = 7919
        kinds: dict[str, Callable[[int], Any]] = {
            "insert_many of 8": lambda _k: items.insert_many(item_docs(8)),
            "update_one $set by _id": lambda k: sessions.update_one(
                {"_id": f"session_{(k * step) % SESSIONS:032x}"},
                {"$set": {"version": k, "last_sequence": k}}),
            # a round of storage's Session writer: upserts of 32 Sessions in one command, which
            # FerretDB v1 runs as 32 transactions
            "bulk_write of 32 upserts": lambda k: sessions.bulk_write([UpdateOne(
                {"_id": f"session_{(k * 32 + j) * step % SESSIONS:032x}"},
                {"$set": {"version": k, "last_sequence": k}}, upsert=True) for j in range(32)],
                ordered=False),
        }
        for kind, op in kinds.items():
            for k in range(20):  # warm
                op(k)
            lat = []
            for k in range(ops):
                t0 = time.perf_counter()
                op(k)
                lat.append(1000 * (time.perf_counter() - t0))
            out[kind] = (percentile(lat, 50), percentile(lat, 99))
        client.close()
    return out


ROW_NAMES = {"insert_many of 8": "insert_many_8", "update_one $set by _id": "update_one",
             "bulk_write of 32 upserts": "bulk_write_32"}


def run(run_: Run, quick: bool = False) -> None:
    """Case 7 of ``make bench``: one pair (the order alternates with the repeat), each command
    kind's p50 and p99 under ``synchronous=full`` (the default) against ``off`` (the opt-in)."""
    t0 = time.monotonic()
    binary = install_ferretdb()
    ops = 40 if quick else 400
    order = LEVELS if run_.repeat % 2 == 1 else tuple(reversed(LEVELS))
    got = {level: measure(binary, level, ops) for level in order}
    for kind, name in ROW_NAMES.items():
        (f50, f99), (o50, o99) = got["full"][kind], got["off"][kind]
        run_.add(Result(f"7_durability_{name}_p50", f50, o50, "info", "ms",
                        notes=f"{kind}: wall ms per command under -sqlite-synchronous full (the "
                              f"default) vs off (the opt-in), {ops} commands a side; p99 "
                              f"{f99:.2f} vs {o99:.2f} ms"))
    progress(f"  case 7 took {time.monotonic() - t0:.0f}s")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--ops", type=int, default=400, help="commands of each kind per side")
    args = ap.parse_args(argv)
    binary = install_ferretdb()
    runs: dict[str, list[dict[str, tuple[float, float]]]] = {lv: [] for lv in LEVELS}
    for i in range(args.pairs):
        for level in LEVELS if i % 2 == 0 else tuple(reversed(LEVELS)):
            runs[level].append(measure(binary, level, args.ops))
            print(f"pair {i + 1} {level}: " + ", ".join(
                f"{k} p50 {a:.2f} ms p99 {b:.2f} ms" for k, (a, b) in runs[level][-1].items()),
                flush=True)
    print(f"\nwall ms per command, median of {args.pairs} pairs ({args.ops} commands each):")
    for kind in runs["full"][0]:
        row = []
        for q, name in ((0, "p50"), (1, "p99")):
            f = statistics.median(r[kind][q] for r in runs["full"])
            o = statistics.median(r[kind][q] for r in runs["off"])
            row.append(f"{name} full {f:.2f} off {o:.2f} ratio {f / o:.2f}")
        print(f"  {kind:24s} " + "; ".join(row))


if __name__ == "__main__":
    main()

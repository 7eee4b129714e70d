"""Store-level comparison of FerretDB on SQLite and on PostgreSQL (docs/local-stack.md):
``PYTHONPATH=$PWD .venv/bin/python -m bench.store_backends sqlite postgresql``. Each backend on a
private stack (no Kafka): 20 000 documents, 8 threads, 15 s of upserts by ``_id`` then 15 s of
lookups by ``_id``; ops/s and CPU seconds of the store's processes per 1 000 operations."""
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from pymongo import MongoClient

from deploy.local.stack import Stack
from deploy.local.stack.processes import proc_stats

TICK = os.sysconf("SC_CLK_TCK")

def group_cpu(pgids):
    tot = 0
    for _pid, rest in proc_stats():
        # PostgreSQL's children make themselves group leaders: count the postmaster's children too
        if int(rest[2]) in pgids or int(rest[1]) in pgids:
            tot += int(rest[11]) + int(rest[12])
    return tot / TICK

def phase(coll, kind, n_docs, seconds, threads=8):
    stop = time.monotonic() + seconds
    counts = [0] * threads
    def work(i):
        import random
        r = random.Random(i)
        while time.monotonic() < stop:
            k = f"s{r.randrange(n_docs)}"
            if kind == "upsert":
                coll.update_one({"_id": k}, {"$set": {"n": r.random(), "t": time.time()}},
                                upsert=True)
            else:
                coll.find_one({"_id": k})
            counts[i] += 1
    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts)

def main(backend, n_docs=20000, seconds=15):
    state = Path(tempfile.mkdtemp(prefix="sc-storebench-"))
    st = Stack.on_free_ports(state, echo=False, external_kafka="127.0.0.1:9", store_backend=backend)
    st.up()
    try:
        procs = {p.name: p for p in st.options().state.procs()}
        pgids = {p.pgid for n, p in procs.items() if n in ("ferretdb", "postgres")}
        c = MongoClient(st.mongodb_uri)
        coll = c["storebench"]["sessions"]
        for i in range(0, n_docs, 1000):
            coll.insert_many([{"_id": f"s{j}", "n": 0, "pad": "x" * 200}
                              for j in range(i, i + 1000)])
        time.sleep(1)
        for kind in ("upsert", "find"):
            c0, t0 = group_cpu(pgids), time.monotonic()
            n = phase(coll, kind, n_docs, seconds)
            dt, dc = time.monotonic() - t0, group_cpu(pgids) - c0
            print(f"{backend} {kind}: {n / dt:.0f} ops/s, store CPU {dc:.1f} s = "
                  f"{1000 * dc / n:.2f} s per 1000 ops (n={n}, {dt:.1f}s)", flush=True)
        c.close()
    finally:
        st.down()
        shutil.rmtree(state, ignore_errors=True)

if __name__ == "__main__":
    for b in sys.argv[1:]:
        main(b)

"""Case 4 — receipt deadlines: runs ``bench/receipts_deadlines.py`` (written and owned by the
receipts developer) as a subprocess on this run's stack and turns its JSON result into rows.
Its figures are absolute (lateness after the window, bytes per pending call): the targets are
fixed bounds (p99 ≤ 100 ms, ≤ 2 KB per call), so the "baseline" column holds the bound and the
ratio is value / bound (target ≤ 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from bench.common import BENCH_DIR, REPO, Infra, Result, Run, plot_latencies, progress

SCRIPT = REPO / "bench" / "receipts_deadlines.py"


def run(run_: Run, infra: Infra | None, quick: bool = False) -> None:
    if not SCRIPT.exists():
        run_.add(Result("4_receipts_lateness_p99", None, 100.0, "<= 1.0", "ms",
                        "MISSING: bench/receipts_deadlines.py does not exist"))
        return
    # quick: a smoke of the whole path (tracker → storage → session.items), not a figure
    args = (["--calls", "60", "--sessions", "10", "--window", "2", "--spread", "1",
             "--warmup", "20"] if quick else [])
    env = dict(os.environ, PYTHONPATH=str(REPO))
    if infra is not None:
        env.update(KAFKA_BOOTSTRAP_SERVERS=infra.bootstrap, MONGODB_URI=infra.mongodb_uri)
    progress(f"  running {SCRIPT.name} {' '.join(args)}")
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, check=False, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-600:].replace("\n", " | ")
        run_.add(Result("4_receipts_lateness_p99", None, 100.0, "<= 1.0", "ms",
                        f"FAILED (exit {proc.returncode}): {tail}"))
        return
    res = json.loads(lines[-1])
    lat = res.get("item_lateness") or {}
    calls = res.get("calls")
    common = (f"{calls} pending calls, window {res.get('window_s')}s, spread "
              f"{res.get('spread_s')}s; verdicts before deadline "
              f"{res.get('verdicts_before_deadline')}; Items {res.get('item_states')}, "
              f"duplicates {res.get('duplicate_items')}")
    for key in ("p50_ms", "p99_ms", "max_ms"):
        if key in lat:
            bound = 100.0 if key == "p99_ms" else None
            run_.add(Result(f"4_receipts_lateness_{key.removesuffix('_ms')}", float(lat[key]),
                            bound, "<= 1.0" if bound else "info", "ms",
                            f"over every call: the function_call_application Item's append "
                            f"time on session.items minus the call's deadline; split: tracker "
                            f"(fact on core.facts) {res.get('fact_lateness')}, storage (fact → "
                            f"Item) {res.get('storage_delay')}; cpu while the verdicts fell "
                            f"due (cores) {res.get('cpu_while_due')}; {common}"))
    if not lat:
        run_.add(Result("4_receipts_lateness_p99", None, 100.0, "<= 1.0", "ms",
                        f"no Item lateness in the result: {str(res)[:400]}"))
    if "rss_per_call_bytes" in res:
        run_.add(Result("4_receipts_rss_per_call", float(res["rss_per_call_bytes"]), 2048.0,
                        "<= 1.0", "bytes",
                        f"RSS growth / pending calls; retained (deep size) "
                        f"{res.get('retained_per_call_bytes')} B/call; RSS "
                        f"{res.get('rss_before_mb')}→{res.get('rss_after_mb')} MB; {common}"))
    if res.get("storage_timings"):
        progress("  storage's await timings over the measured phase:\n"
                 + str(res["storage_timings"]))
    samples = res.get("lateness_samples_ms")
    if isinstance(samples, list) and samples:
        plot_latencies(BENCH_DIR / "receipts_lateness.png", "uncertain verdict lateness",
                       {"lateness": samples})

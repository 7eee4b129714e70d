"""``python -m bench [--quick] [--repeat N] [--case NAME ...]`` — run the benchmark cases (each
N times, each time on a freshly started private stack), append one row per figure and repeat,
and with N > 1 one row of medians per figure, to ``bench/results.csv``; print the table. Cases:
admission, pipeline, growth, receipts, harness, bombs, durability."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import common
from bench.common import (
    Infra,
    Result,
    Run,
    infrastructure,
    medians,
    progress,
    run_failures,
    table,
    write_rows,
)

CASES = ("admission", "pipeline", "growth", "receipts", "harness", "bombs", "durability")
NEEDS_STACK = ("pipeline", "growth", "receipts", "harness", "bombs")
# the order the cases run in: the pipeline before the growth case (its rate), the growth case,
# the longest, last — a run stopped before the end has every other case's repeats
RUN_ORDER = ("admission", "pipeline", "receipts", "harness", "bombs", "durability", "growth")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="shorter runs (smoke test, noisier)")
    ap.add_argument("--case", action="append", choices=CASES,
                    help="run only this case (repeatable; default: all)")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="run each case N times, each on a freshly started private stack; "
                         "report each figure's median with its min–max and judge the target "
                         "on the median (make bench: 3)")
    ap.add_argument("--profile", action="store_true",
                    help="also run the product server under pyinstrument (pipeline, bombs)")
    ap.add_argument("--growth-rate", type=float, default=None,
                    help="requests/s of the growth phases (default: half the pipeline's "
                         "saturated rate (its median over the repeats), else 10)")
    ap.add_argument("--no-csv", action="store_true", help="do not append to bench/results.csv")
    ap.add_argument("--no-doc", action="store_true",
                    help="do not rewrite docs/benchmarks.md's results (a run of every case "
                         "with --repeat ≥ 2 that wrote its rows does, from those rows)")
    ap.add_argument("--ref", default=None,
                    help="measure this commit (git archive into a temp dir, with the working "
                         "tree's bench/), not the working tree; rows name the commit")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.ref:
        rest = list(argv or sys.argv[1:])
        i = rest.index("--ref") if "--ref" in rest else -1
        if i >= 0:
            del rest[i:i + 2]
        rest = [a for a in rest if not a.startswith("--ref=")]
        return run_from_snapshot(args.ref, rest)
    cases = args.case or list(CASES)
    n = args.repeat
    first = Run(repeats=n)
    runs = [first] + [Run(date=first.date, commit=first.commit, repeat=k + 1, repeats=n)
                      for k in range(1, n)]
    t0 = time.monotonic()
    load0 = _load()
    progress(f"cases {', '.join(cases)}{' (quick)' if args.quick else ''}, {n} repeat"
             f"{'s' if n > 1 else ''}; commit {first.commit}; load average {load0}")
    errors: list[str] = []
    summary: list[Result] = []
    interrupted = False
    # a SIGTERM (a CI timeout, a stopped run) ends the run as Ctrl-C does: the stacks are
    # stopped, the fill's copy removed and the rows so far written, marked as interrupted
    before = signal.signal(signal.SIGTERM, _interrupt)
    fills: dict[str, Any] = {}
    try:
        # case by case, each case's repeats one after the other: the growth case runs at the
        # same rate in every repeat (half the pipeline's median), and its repeats share a fill
        rates: list[float] = []
        for case in sorted(cases, key=RUN_ORDER.index):
            for run in runs:
                tag = f"case {case}" + (f", repeat {run.repeat}/{n}" if n > 1 else "")
                try:
                    with _stack(case) as infra:
                        rate = _run_case(case, run, infra, args, rates, fills)
                        if case == "pipeline" and rate:
                            rates.append(rate)
                except Exception as exc:  # one repeat's crash is a finding: the rest still run
                    traceback.print_exc()
                    errors.append(f"{tag}: raised {type(exc).__name__}: {str(exc)[:300]}")
                    progress(f"FAILED: {errors[-1]}")
    except KeyboardInterrupt:
        interrupted = True
        errors.append("interrupted (SIGINT or SIGTERM) before the end: the rows are what was "
                      "measured until then")
        progress(f"FAILED: {errors[-1]}")
    finally:
        signal.signal(signal.SIGTERM, before)
        for cleanup in fills.values():
            with contextlib.suppress(Exception):
                cleanup.remove()
        took = time.monotonic() - t0
        # A figure that could not be measured — none, NaN, infinite, or a case with no row, in
        # any repeat — fails the run; CI's smoke (``--quick``) relies on it. So does a repeat
        # that raised. A missed target does not (figures here are noisy).
        failures = list(errors)
        for run in runs:
            pre = f"repeat {run.repeat}: " if n > 1 else ""
            failures += [pre + f for f in run_failures(cases, run.results)]
        results = [r for run in runs for r in run.results]
        if results:
            summary = medians(runs) if n > 1 else []
            if n > 1:
                summary.append(Result(
                    "0_run", took, None, "info", "s",
                    f"{n} repeats of {', '.join(cases)}{' (quick)' if args.quick else ''}, "
                    f"each case's repeats one after the other, each on a freshly started "
                    f"private stack; load average (1/5/15 min) at the start {load0}, at the "
                    f"end {_load()}; {os.cpu_count()} cores ({_cpu_model()}); "
                    + (f"what failed: {'; '.join(failures)[:1500]}" if failures
                       else "no repeat failed")))
            if not args.no_csv:
                for run in runs:
                    run.write_csv()
                if summary:
                    write_rows(common.RESULTS_CSV, first.date, first.commit, summary,
                               "median")
                progress(f"appended {len(results) + len(summary)} rows to "
                         f"{common.RESULTS_CSV}")
            for run in runs:
                print(f"\nrepeat {run.repeat} of {n}:" if n > 1 else "")
                print(run.table())
            if summary:
                print(f"\nmedians over {n} repeats (each target judged on its median):")
                print(table(summary))
        progress(f"done in {took:.0f}s")
    for f in failures:
        progress(f"FAILED: {f}")
    # the page shows the latest full repeated run, whatever it found (what failed is in its
    # 0_run row); a run of some cases, a quick one or a single one leaves it alone
    if (n > 1 and summary and not interrupted and not args.no_csv and not args.no_doc
            and not args.quick and set(cases) == set(CASES)):
        from bench import report

        path = report.write_doc(first.date)
        progress(f"results of this run written to {path}")
    return 1 if failures else 0


@contextlib.contextmanager
def _stack(case: str) -> Iterator[Infra | None]:
    """A freshly started private stack for one repeat of a case that needs one."""
    if case not in NEEDS_STACK:
        yield None
        return
    with infrastructure() as infra:
        yield infra


def _run_case(case: str, run: Run, infra: Infra | None, args: argparse.Namespace,
              rates: list[float], fills: dict[str, Any]) -> float | None:
    import statistics

    if case == "admission":
        from bench import admission_pure

        progress("case 1: admission, pure")
        admission_pure.run(run, quick=args.quick)
        return None
    if case == "durability":  # its own FerretDB pair, no stack
        from bench import store_durability_cost

        progress("case 7: the store's durable default (synchronous=full) vs the fast opt-in")
        store_durability_cost.run(run, quick=args.quick)
        return None
    assert infra is not None
    if case == "pipeline":
        from bench import pipeline

        progress("case 2: pipeline")
        return pipeline.run(run, infra, quick=args.quick, profile=args.profile)
    if case == "growth":
        from bench import growth

        progress("case 3: growth")
        rate = 2 * args.growth_rate if args.growth_rate else (
            statistics.median(rates) if rates else None)
        if "growth" not in fills:
            fills["growth"] = growth.FillSnapshot()
        growth.run(run, infra, quick=args.quick, rate=rate, snapshot=fills["growth"])
        return None
    if case == "receipts":
        from bench import receipts_case

        progress("case 4: receipt deadlines")
        receipts_case.run(run, infra, quick=args.quick)
    elif case == "bombs":
        from bench import image_bombs

        progress("case 6: image bombs from tenant A, tenant B's reads")
        image_bombs.run(run, infra, quick=args.quick, profile=args.profile)
    elif case == "harness":
        from bench import harness_overhead

        progress("case 5: real Codex Runtime overhead per Turn vs the bare harness")
        harness_overhead.run(run, infra, quick=args.quick)
        from bench import harness_overhead_claude

        progress("case 5b: real Claude Code Runtime overhead per Turn vs the bare harness")
        harness_overhead_claude.run(run, infra, quick=args.quick)
    return None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _load() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu model unknown"


def run_from_snapshot(ref: str, argv: list[str]) -> int:
    """Export ``ref`` to a temp dir, overlay the current bench/ package and run there."""
    import os
    import shutil
    import subprocess
    import tempfile

    from bench.common import BENCH_DIR, REPO

    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout.strip()
    snap = Path(tempfile.mkdtemp(prefix=f"session-core-bench-{sha}-"))
    try:
        archive = subprocess.run(["git", "archive", ref], cwd=REPO, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(snap)], input=archive, check=True)
        (snap / "bench").mkdir(exist_ok=True)
        for f in (REPO / "bench").glob("*.py"):
            shutil.copy2(f, snap / "bench" / f.name)
        progress(f"measuring {ref} ({sha}) from {snap}")
        env = dict(os.environ, BENCH_OUTPUT_DIR=str(BENCH_DIR), BENCH_COMMIT=sha,
                   PYTHONPATH=str(snap))
        return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=snap, env=env,
                              check=False).returncode
    finally:
        shutil.rmtree(snap, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

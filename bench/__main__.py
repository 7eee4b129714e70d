"""``python -m bench [--quick] [--case NAME ...]`` — run the benchmark cases, append one row per
figure to ``bench/results.csv``, print the table. Cases: admission, pipeline, growth, receipts,
harness, bombs."""

from __future__ import annotations

import argparse
import sys
import time

from bench.common import RESULTS_CSV, Run, infrastructure, progress, run_failures

CASES = ("admission", "pipeline", "growth", "receipts", "harness", "bombs")
NEEDS_STACK = ("pipeline", "growth", "receipts", "harness", "bombs")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="shorter runs (smoke test, noisier)")
    ap.add_argument("--case", action="append", choices=CASES,
                    help="run only this case (repeatable; default: all)")
    ap.add_argument("--profile", action="store_true",
                    help="also run the product server under pyinstrument (pipeline)")
    ap.add_argument("--growth-rate", type=float, default=None,
                    help="requests/s of the growth phases (default: half the pipeline's "
                         "saturated rate, else 10)")
    ap.add_argument("--no-csv", action="store_true", help="do not append to bench/results.csv")
    ap.add_argument("--ref", default=None,
                    help="measure this commit (git archive into a temp dir, with the working "
                         "tree's bench/), not the working tree; rows name the commit")
    args = ap.parse_args(argv)
    if args.ref:
        rest = list(argv or sys.argv[1:])
        i = rest.index("--ref") if "--ref" in rest else -1
        if i >= 0:
            del rest[i:i + 2]
        rest = [a for a in rest if not a.startswith("--ref=")]
        return run_from_snapshot(args.ref, rest)
    cases = args.case or list(CASES)
    run = Run()
    t0 = time.monotonic()
    progress(f"cases {', '.join(cases)}{' (quick)' if args.quick else ''}; commit {run.commit}")
    try:
        if "admission" in cases:
            from bench import admission_pure

            progress("case 1: admission, pure")
            admission_pure.run(run, quick=args.quick)
        if any(c in cases for c in NEEDS_STACK):
            with infrastructure() as infra:
                rate = None
                if "pipeline" in cases:
                    from bench import pipeline

                    progress("case 2: pipeline")
                    rate = pipeline.run(run, infra, quick=args.quick, profile=args.profile)
                if "growth" in cases:
                    from bench import growth

                    progress("case 3: growth")
                    if args.growth_rate:
                        rate = 2 * args.growth_rate
                    growth.run(run, infra, quick=args.quick, rate=rate)
                if "receipts" in cases:
                    from bench import receipts_case

                    progress("case 4: receipt deadlines")
                    receipts_case.run(run, infra, quick=args.quick)
                if "bombs" in cases:
                    from bench import image_bombs

                    progress("case 6: image bombs from tenant A, tenant B's reads")
                    image_bombs.run(run, infra, quick=args.quick)
                if "harness" in cases:
                    from bench import harness_overhead

                    progress("case 5: real Codex Runtime overhead per Turn vs the bare harness")
                    harness_overhead.run(run, infra, quick=args.quick)
                    from bench import harness_overhead_claude

                    progress("case 5b: real Claude Code Runtime overhead per Turn vs the bare "
                             "harness")
                    harness_overhead_claude.run(run, infra, quick=args.quick)
    finally:
        if run.results:
            if not args.no_csv:
                run.write_csv()
                progress(f"appended {len(run.results)} rows to {RESULTS_CSV}")
            print()
            print(run.table())
        progress(f"done in {time.monotonic() - t0:.0f}s")
    # A figure that could not be measured — none, NaN, infinite, or a case with no row — fails
    # the run; CI's smoke (``--quick``) relies on it. A missed target does not (figures here are
    # noisy).
    failures = run_failures(cases, run.results)
    for f in failures:
        progress(f"FAILED: {f}")
    return 1 if failures else 0


def run_from_snapshot(ref: str, argv: list[str]) -> int:
    """Export ``ref`` to a temp dir, overlay the current bench/ package and run there."""
    import os
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

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

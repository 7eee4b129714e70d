"""``python -m bench.report [--date DATE] [--print]`` — write the results section of
docs/benchmarks.md from bench/results.csv: each case's latest run with rows of medians (``make
bench``, ``--repeat 3``; one run when the latest measured every case, else each run's section
for its cases, said so), or the run of ``DATE`` (its ``date`` column). Every number on that
page comes from these rows; the runner calls ``write_doc`` at the end of a full repeated run,
and this command writes it again from the file (e.g. after a run stopped before the end)."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.common import BENCH_DIR, RESULTS_CSV, migrate_header

# the working tree's page, also when the run measures a snapshot (``--ref``: BENCH_OUTPUT_DIR)
DOC = BENCH_DIR.parent / "docs" / "benchmarks.md"
BEGIN = ("<!-- bench-results:begin — written by `python -m bench.report` from "
         "bench/results.csv; not edited by hand -->")
END = "<!-- bench-results:end -->"

# what each figure is, in the table's words (figures not named here show their row's name)
LABELS = {
    "1a_admission_text_1part": "1a admission, 1 text part (validations/s)",
    "1b_admission_text_100parts": "1b admission, 100 text parts (validations/s)",
    "1c_admission_png1MB_jpeg200KB": "1c admission, PNG 1 MB + JPEG 200 KB (ms)",
    "2_pipeline_throughput": "2 pipeline, product ÷ fair baseline (Items/s)",
    "2_pipeline_cpu_per_item": "2 CPU per Item, product's processes ÷ baseline's, saturated "
                               "(ms CPU)",
    "2_pipeline_cpu_per_item_store": "2 CPU per Item, the store, product's run ÷ baseline's "
                                     "(ms CPU)",
    "2_pipeline_cpu_per_item_broker": "2 CPU per Item, the broker, product's run ÷ baseline's "
                                      "(ms CPU)",
    "2_pipeline_cpu_per_item_half_rate": "2 CPU per Item, product ÷ baseline at the same rate "
                                         "(ms CPU)",
    "2_pipeline_latency_p50": "2 latency p50 at half the product's rate (ms)",
    "2_pipeline_latency_p99": "2 latency p99 at half the product's rate (ms)",
    "2_relay_ceiling": "2 raw relay ceiling (records/s)",
    "3_growth_p99_one": "3 growth p99, one Session, 10⁵ ÷ 10³ Items (ms)",
    "3_growth_p99_one_1m": "3 growth p99, one Session, 10⁶ ÷ 10³ Items (ms)",
    "3_growth_p99_across": "3 growth p99, across Sessions (steady), 10⁵ ÷ 10³ (ms)",
    "3_growth_p99_across_1m": "3 growth p99, across Sessions (steady), 10⁶ ÷ 10³ (ms)",
    "3_growth_p99_first_touch": "3 growth p99, first touch at 10⁵ ÷ steady across at 10³ (ms)",
    "3_growth_p99_first_touch_1m": "3 growth p99, first touch at 10⁶ ÷ steady across at 10³ "
                                   "(ms)",
    "4_receipts_lateness_p50": "4 receipts lateness p50, 10 000 calls (ms)",
    "4_receipts_lateness_p99": "4 receipts lateness p99, 10 000 calls (ms; bound 100)",
    "4_receipts_lateness_max": "4 receipts lateness max (ms)",
    "4_receipts_rss_per_call": "4 receipts RSS per pending call (bytes; bound 2 048)",
    "5_codex_runtime_turn_overhead": "5 real Codex Runtime ÷ bare, Turn (ms, median)",
    "5_claude_runtime_turn_overhead": "5 real Claude Code Runtime ÷ bare, Turn (ms, median)",
    "6_bombs_b_get_p99": "6 image bombs: tenant B's GET p99 ÷ alone (ms)",
    "6_bombs_rss_peak": "6 image bombs: RSS peak ÷ the chart's limit (MiB)",
    "7_durability_insert_many_8_p50": "7 store, synchronous=full ÷ off: insert_many of 8, p50 (ms)",
    "7_durability_update_one_p50": "7 store, synchronous=full ÷ off: update_one by _id, p50 (ms)",
    "7_durability_bulk_write_32_p50": "7 store, synchronous=full ÷ off: bulk_write of 32 "
                                      "upserts, p50 (ms)",
}


def load(path: Path = RESULTS_CSV) -> list[dict[str, str]]:
    migrate_header(path)
    with path.open(newline="") as f:
        return [{k: (v or "") for k, v in row.items() if k is not None}
                for row in csv.DictReader(f)]


def latest_repeated(rows: Sequence[dict[str, str]]) -> str | None:
    dates = [r["date"] for r in rows if r.get("repeat") == "median"]
    return max(dates) if dates else None


def _f(text: str, fmt: str = "") -> str:
    if not text:
        return "–"
    v = float(text)
    if fmt:
        return format(v, fmt)
    if abs(v) >= 1000:
        return f"{v:,.0f}".replace(",", " ")
    if abs(v) >= 100:
        return f"{v:.1f}"
    return f"{v:.4g}"


def _range(lo: str, hi: str, fmt: str = "") -> str:
    return "–" if not lo else f"{_f(lo, fmt)}–{_f(hi, fmt)}"


def _target(t: str) -> str:
    return {"info": "info", "": "–"}.get(t, t.replace(">=", "≥").replace("<=", "≤"))


def latest_per_case(rows: Sequence[dict[str, str]]) -> dict[str, str]:
    """Case number ("1".."6") → the date of the latest run with rows of medians for it."""
    out: dict[str, str] = {}
    for r in rows:
        if r.get("repeat") == "median" and r["case"][:1].isdigit() and r["case"] != "0_run":
            k = r["case"][:1]
            out[k] = max(out.get(k, ""), r["date"])
    return out


def render_latest(rows: Sequence[dict[str, str]]) -> str:
    """The latest repeated run of each case: one section per run, in case order (one section
    when one run measured them all)."""
    per = latest_per_case(rows)
    dates: dict[str, set[str]] = {}
    for k in sorted(per):
        dates.setdefault(per[k], set()).add(k)
    parts = []
    if len(dates) > 1:
        parts.append("The cases' latest repeated runs are not one run: "
                     + "; ".join(f"cases {', '.join(sorted(ks))} from the run of {d}"
                                 for d, ks in dates.items()) + ".")
    parts += [render(rows, d, ks if len(dates) > 1 else None) for d, ks in dates.items()]
    return "\n\n".join(parts)


def render(rows: Sequence[dict[str, str]], date: str, cases: set[str] | None = None) -> str:
    mine = [r for r in rows if r["date"] == date
            and (cases is None or r["case"] == "0_run" or r["case"][:1] in cases)]
    med = sorted((r for r in mine if r.get("repeat") == "median" and r["case"] != "0_run"),
                 key=lambda r: r["case"][:1])  # by case number, each in its run order
    meta = next((r for r in mine if r["case"] == "0_run"), None)
    repeats = sorted({r["repeat"] for r in mine if r.get("repeat", "").isdigit()}, key=int)
    commit = mine[0]["commit"] if mine else "?"
    # the heading names the commit; the date is the body's (a page's headings carry no dates)
    out = [f"### Run at {commit} — medians of {len(repeats)} repeats", ""]
    if meta:
        out += [f"Run of {date}, {_f(meta['value'])} s in all. {meta['notes']}.", ""]
    else:
        out += [f"Run of {date}.", ""]
    out += ["| figure | value (median; min–max) | baseline (median) | ratio (median) | "
            "ratio min–max | repeats | failed | target | verdict |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in med:
        verdict = r.get("verdict", "")
        shown = f"**{verdict}**" if verdict in ("MISSED", "INVALID", "UNUSABLE",
                                                "MISSING") else verdict
        ratio = _f(r["ratio"], ".3f") if r["ratio"] else "–"
        if verdict in ("MISSED",):
            ratio = f"**{ratio}**"
        out.append(
            f"| {LABELS.get(r['case'], r['case'])} | {_f(r['value'])} "
            f"({_range(r.get('value_min', ''), r.get('value_max', ''))}) | {_f(r['baseline'])} "
            f"| {ratio} | {_range(r.get('ratio_min', ''), r.get('ratio_max', ''), '.3f')} | "
            f"{r.get('n') or '–'} | {r.get('failed') or '–'} | {_target(r['target'])} "
            f"| {shown} |")
    if repeats:
        out += ["", "Each repeat's ratio (value where the figure has no ratio):", "",
                "| figure | " + " | ".join(f"repeat {k}" for k in repeats) + " |",
                "|---|" + "---|" * len(repeats)]
        per = {(r["case"], r["repeat"]): r for r in mine if r.get("repeat", "").isdigit()}
        for r in med:
            cells = []
            for k in repeats:
                row = per.get((r["case"], k))
                if row is None:
                    cells.append("–")
                    continue
                cell = _f(row["ratio"], ".3f") if row["ratio"] else _f(row["value"])
                if row.get("verdict") == "INVALID":
                    cell += " (INVALID)"
                elif row.get("failed") not in ("", "0", None):
                    cell += f" ({row['failed']} failed)"
                cells.append(cell)
            out.append(f"| {LABELS.get(r['case'], r['case'])} | " + " | ".join(cells) + " |")
    cpu = next((r for r in med if r["case"] == "2_pipeline_cpu_per_item"), None)
    if cpu:
        out += ["", "CPU per Item, each repeat's notes (ms CPU per Item: the server's processes, "
                "the store, the broker; the CPU seconds and Items behind them):", ""]
        for k in repeats:
            row = next((r for r in mine if r["case"] == "2_pipeline_cpu_per_item"
                        and r.get("repeat") == k), None)
            if row:
                note = row["notes"].split("; product ", 1)[-1]
                out.append(f"- repeat {k}: product {note}")
    return "\n".join(out)


def write_doc(date: str | None = None, path: Path = DOC, rows_from: Path = RESULTS_CSV) -> Path:
    rows = load(rows_from)
    if date is None and latest_repeated(rows) is None:
        raise SystemExit(f"no run with rows of medians in {rows_from}")
    section = render(rows, date) if date else render_latest(rows)
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{path}: no results markers ({BEGIN!r} … {END!r})")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(f"{head}{BEGIN}\n\n{section}\n\n{END}{tail}")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    ap.add_argument("--date", help="the run's date column (default: each case's latest run "
                                   "with rows of medians)")
    ap.add_argument("--print", action="store_true", help="print the section, write nothing")
    args = ap.parse_args(argv)
    if args.print:
        rows = load()
        if latest_repeated(rows) is None:
            print("no run with rows of medians", file=sys.stderr)
            return 1
        print(render(rows, args.date) if args.date else render_latest(rows))
        return 0
    print(write_doc(args.date))
    return 0


if __name__ == "__main__":
    sys.exit(main())

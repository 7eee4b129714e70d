"""What every benchmark case shares: statistics, result rows (``bench/results.csv``), the table,
plots, progress lines, and the infrastructure (a private local stack unless
``KAFKA_BOOTSTRAP_SERVERS`` / ``MONGODB_URI`` point at one)."""

from __future__ import annotations

import contextlib
import csv
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deploy.local.stack import Stack
from deploy.local.stack.base import free_port as free_port  # the bench cases take it from here

REPO = Path(__file__).resolve().parent.parent
# With ``--ref`` the runner re-executes itself from a snapshot of that commit; its outputs still
# go to the working tree's bench/ (BENCH_OUTPUT_DIR) and its rows name that commit.
BENCH_DIR = Path(os.environ.get("BENCH_OUTPUT_DIR") or REPO / "bench")
RESULTS_CSV = BENCH_DIR / "results.csv"
# The first nine columns are those of every row since the file began. The rest came with
# ``--repeat`` (2026-12-06): ``repeat`` is the repeat's number ("1".."N") on a row of one
# repeat, "median" on a row of the medians over the repeats (``n`` of them, with the min–max
# of the value and of the ratio); ``failed`` the failed requests behind the figure (summed over
# the repeats on a median row) and ``verdict`` the run's own. Rows written before have none of
# these (one run, no repeats): ``write_rows`` moves an older header to this one, and the older
# rows keep their 9 fields (a csv.DictReader gives None for the rest).
CSV_FIELDS = ("date", "commit", "case", "value", "baseline", "ratio", "target", "unit", "notes",
              "repeat", "n", "value_min", "value_max", "ratio_min", "ratio_max", "failed",
              "verdict")

_T0 = time.monotonic()


def progress(msg: str) -> None:
    print(f"[bench {time.monotonic() - _T0:6.1f}s] {msg}", flush=True)


# ------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    median: float
    lo: float
    hi: float
    q1: float
    q3: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        v = sorted(values)
        if len(v) >= 4:
            q1, _, q3 = statistics.quantiles(v, n=4)
        else:
            q1, q3 = v[0], v[-1]
        return cls(statistics.median(v), v[0], v[-1], q1, q3, len(v))

    def text(self, fmt: str = "{:.4g}") -> str:
        f = fmt.format
        return f"median {f(self.median)} (min {f(self.lo)}, max {f(self.hi)}, n={self.n})"


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for an empty sample."""
    v = sorted(values)
    if not v:
        return float("nan")
    k = max(0, min(len(v) - 1, round(p / 100 * len(v) + 0.5) - 1))
    return v[k]


# ------------------------------------------------------------------------------------------
# results
# ------------------------------------------------------------------------------------------


@dataclass
class Result:
    case: str
    value: float | None
    baseline: float | None
    target: str  # e.g. ">= 0.5", "<= 1.5", "info"
    unit: str
    notes: str = ""
    ratio: float | None = None  # default: value / baseline
    failed: int | None = None  # failed requests behind the figure (a target needs 0)
    # why the ratio does not measure what the target is about (e.g. its baseline phase
    # stalled): the verdict is INVALID, never met
    invalid: str = ""
    # a row of medians over repeats (``medians``): how many repeats it stands on, and the
    # min–max of the value and the ratio over them
    n: int | None = None
    value_range: tuple[float, float] | None = None
    ratio_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.ratio is None and self.value is not None and self.baseline:
            self.ratio = self.value / self.baseline
        if self.invalid:
            self.notes = f"INVALID: {self.invalid}; {self.notes}"

    @property
    def verdict(self) -> str:
        if self.value is None:
            return "MISSING"
        if unusable(self):
            return "UNUSABLE"
        if self.ratio is None or not self.target or self.target == "info":
            return "info"
        if self.failed:
            return "MISSED"
        if self.invalid:
            return "INVALID"
        op, _, num = self.target.partition(" ")
        bound = float(num)
        ok = self.ratio >= bound if op == ">=" else self.ratio <= bound
        return "met" if ok else "MISSED"


def unusable(r: Result) -> str:
    """Why a row is not a figure the run can stand on ("" when it is): no value, a value,
    baseline or ratio that is NaN or infinite (a percentile of no samples, a p99 when nothing came
    back), or a target without a ratio (a baseline of zero or none)."""
    if r.value is None:
        return "no figure"
    for name, v in (("value", r.value), ("baseline", r.baseline), ("ratio", r.ratio)):
        if v is not None and not math.isfinite(v):
            return f"{name} is {v}"
    if r.target and r.target != "info" and r.ratio is None:
        return f"no ratio for target {r.target!r} (baseline {r.baseline})"
    return ""


# the rows each case must yield (by name prefix); a case that yields none of one is empty
CASE_ROWS: dict[str, tuple[str, ...]] = {
    "admission": ("1",), "pipeline": ("2_pipeline_throughput", "2_pipeline_cpu_per_item"),
    "growth": ("3_",), "receipts": ("4_",),
    "harness": ("5_codex", "5_claude"), "bombs": ("6_bombs_b_get_p99", "6_bombs_rss_peak"),
    "durability": ("7_durability_insert_many_8", "7_durability_update_one",
                   "7_durability_bulk_write_32")}


def run_failures(cases: Sequence[str], results: Sequence[Result]) -> list[str]:
    """What fails a run (``python -m bench``, CI's ``make bench-quick``): every unusable row and
    every case that yielded no row. A missed target does not (the figures here are noisy)."""
    out = [f"{r.case}: {why}" for r in results if (why := unusable(r))]
    for case in cases:
        for prefix in CASE_ROWS.get(case, ()):
            if not any(r.case.startswith(prefix) for r in results):
                out.append(f"{case}: no row {prefix}*")
    return out


@dataclass
class Run:
    """The rows of one run of the cases (one repeat, ``repeat`` of ``repeats``)."""

    date: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    commit: str = field(default_factory=lambda: git_commit())
    results: list[Result] = field(default_factory=list)
    repeat: int = 1
    repeats: int = 1

    def add(self, r: Result) -> Result:
        self.results.append(r)
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        rep = f" [repeat {self.repeat}/{self.repeats}]" if self.repeats > 1 else ""
        progress(f"  {r.case}{rep}: value {_num(r.value)} {r.unit}, baseline "
                 f"{_num(r.baseline)}, ratio {ratio} (target {r.target or '-'}) {r.verdict}")
        return r

    def write_csv(self, path: Path | None = None, repeat: str | None = None) -> None:
        """Append this run's rows; ``repeat`` names them (default: this repeat's number)."""
        write_rows(path or RESULTS_CSV, self.date, self.commit, self.results,
                   str(self.repeat) if repeat is None else repeat)

    def table(self) -> str:
        return table(self.results)


def write_rows(path: Path, date: str, commit: str, results: Sequence[Result],
               repeat: str) -> None:
    migrate_header(path)
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(CSV_FIELDS)
        for r in results:
            vr, rr = r.value_range, r.ratio_range
            w.writerow([date, commit, r.case, _num(r.value, raw=True),
                        _num(r.baseline, raw=True),
                        "" if r.ratio is None else f"{r.ratio:.4f}", r.target, r.unit,
                        r.notes, repeat, "" if r.n is None else r.n,
                        _num(vr[0] if vr else None, raw=True),
                        _num(vr[1] if vr else None, raw=True),
                        "" if rr is None else f"{rr[0]:.4f}",
                        "" if rr is None else f"{rr[1]:.4f}",
                        "" if r.failed is None else r.failed, r.verdict])


def migrate_header(path: Path) -> None:
    """An older results file (nine columns) gets the current header; its rows stay as they are,
    byte for byte (a reader sees the new columns empty on them)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    end = data.find(b"\n") + 1 or len(data)
    first, eol = data[:end].rstrip(b"\r\n"), data[:end][len(data[:end].rstrip(b"\r\n")):]
    header = ",".join(CSV_FIELDS).encode()
    if first == header:
        return
    if not header.startswith(first):
        raise RuntimeError(f"{path}: unknown header {first!r}")
    path.write_bytes(header + (eol or b"\r\n") + data[end:])


def table(results: Sequence[Result]) -> str:
    spread = any(r.n is not None for r in results)
    head = ("case", "value", "baseline", "ratio", "failed", "target", "verdict", "unit")
    rows = [head[:4] + (("ratio min–max", "n") if spread else ()) + head[4:]]
    for r in results:
        extra: tuple[str, ...] = ()
        if spread:
            rr = r.ratio_range
            extra = ("-" if rr is None else f"{rr[0]:.3f}–{rr[1]:.3f}",
                     "-" if r.n is None else str(r.n))
        rows.append((r.case, _num(r.value), _num(r.baseline),
                     "-" if r.ratio is None else f"{r.ratio:.3f}", *extra,
                     "-" if r.failed is None else str(r.failed), r.target or "-",
                     r.verdict, r.unit))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for k, row in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def medians(runs: Sequence[Run]) -> list[Result]:
    """One row per figure over the repeats: the median of the value, of the baseline and of
    the ratio (the ratio's median is the one judged; it is not the medians' quotient), with
    the value's and the ratio's min–max. A repeat whose row is ``INVALID`` (its baseline phase
    stalled) or unusable does not count toward the median; with none left the row keeps the
    first repeat's reason. Failed requests are summed over all repeats: a target that needs
    0 failed needs 0 in every repeat (a failure is not noise)."""
    order: list[str] = []
    by_case: dict[str, list[Result]] = {}
    for run in runs:
        for r in run.results:
            if r.case not in by_case:
                order.append(r.case)
            by_case.setdefault(r.case, []).append(r)
    out = []
    for case in order:
        rows = by_case[case]
        good = [r for r in rows if not r.invalid and not unusable(r)]
        first = rows[0]
        if not good:
            bad = next((r for r in rows if unusable(r)), first)
            out.append(Result(case, bad.value, bad.baseline, first.target, first.unit,
                              f"no repeat of {len(rows)} stands: {bad.notes}", ratio=bad.ratio,
                              failed=_failed(rows), invalid=first.invalid, n=0))
            continue
        values = [r.value for r in good if r.value is not None]
        bases = [r.baseline for r in good if r.baseline is not None]
        ratios = [r.ratio for r in good if r.ratio is not None]
        left = len(rows) - len(good)
        note = (f"median of {len(good)} repeat{'s' if len(good) > 1 else ''}"
                + (f" ({left} left out: INVALID or unusable)" if left else "")
                + "; per repeat ratio "
                + ", ".join("-" if r.ratio is None else f"{r.ratio:.3f}" for r in rows)
                + "; value " + ", ".join(_num(r.value) for r in rows)
                + (f"; failed {', '.join(str(r.failed) for r in rows)}"
                   if any(r.failed is not None for r in rows) else ""))
        out.append(Result(
            case, statistics.median(values) if values else None,
            statistics.median(bases) if bases else None, first.target, first.unit, note,
            ratio=statistics.median(ratios) if ratios else None, failed=_failed(rows),
            n=len(good), value_range=(min(values), max(values)) if values else None,
            ratio_range=(min(ratios), max(ratios)) if ratios else None))
    return out


def _failed(rows: Sequence[Result]) -> int | None:
    got = [r.failed for r in rows if r.failed is not None]
    return sum(got) if got else None


def _num(v: float | None, raw: bool = False) -> str:
    if v is None:
        return "" if raw else "-"
    if raw:
        return f"{v:.6g}"
    return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.4g}"


def git_commit() -> str:
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, capture_output=True, text=True, check=True).stdout
        return out + ("+dirty" if dirty.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


# ------------------------------------------------------------------------------------------
# plots
# ------------------------------------------------------------------------------------------


def plot_latencies(path: Path, title: str, series: dict[str, Sequence[float]]) -> Path | None:
    """Histogram + empirical CDF of latency samples (milliseconds), one line per series."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        progress("  matplotlib is not installed: no plot")
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for name, values in series.items():
        if not values:
            continue
        v = sorted(values)
        ax1.hist(v, bins=60, alpha=0.5, label=name)
        ax2.plot(v, [(i + 1) / len(v) for i in range(len(v))], label=name)
    ax1.set_xlabel("latency (ms)")
    ax1.set_ylabel("count")
    ax2.set_xlabel("latency (ms)")
    ax2.set_ylabel("fraction ≤ x")
    ax2.set_xscale("log")
    from matplotlib.ticker import NullFormatter

    ax2.xaxis.set_minor_formatter(NullFormatter())
    for ax in (ax1, ax2):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------
# infrastructure
# ------------------------------------------------------------------------------------------


@dataclass
class Infra:
    bootstrap: str
    mongodb_uri: str
    kind: str  # "external" or "local"
    # a private stack (``kind`` "local"): its components can be stopped and started, and its
    # store's files reached (the growth case's fill snapshot)
    stack: Stack | None = None

    def env(self, tag: str, **extra: str) -> dict[str, str]:
        """Environment for a service subprocess: this stack, its own topics and databases."""
        from shared.store import own_databases_env

        env = dict(os.environ)
        env.update({
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "MONGODB_URI": self.mongodb_uri,
            "SESSION_CORE_TOPIC_PREFIX": f"{tag}.",
            "SESSION_CORE_MONGODB_DATABASE": tag,
            **own_databases_env(tag),  # as the local stack deploys (docs/storage.md)
            "SESSION_CORE_AUTH_DISABLED": "true",
            "SESSION_CORE_HTTP_HOST": "127.0.0.1",
            "SESSION_CORE_LOG_FORMAT": "json",
            "PYTHONPATH": str(REPO),
        })
        env.update(extra)
        return env

    def settings(self, tag: str, **overrides: Any) -> Any:
        from shared.settings import Settings
        from shared.store import own_databases

        values: dict[str, Any] = {
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "MONGODB_URI": self.mongodb_uri,
            "topic_prefix": f"{tag}.",
            "mongodb_database": tag,
            **own_databases(tag),
            "auth_disabled": True,
            **overrides,
        }
        return Settings(**values)


def new_tag(case: str) -> str:
    return f"bench{case}{uuid.uuid4().hex[:6]}"


@contextlib.contextmanager
def infrastructure(keep_state: bool = False) -> Iterator[Infra]:
    """The stack to run against: the one named by the environment, else a private local stack
    (Kafka KRaft + FerretDB) on free ports and a temporary state dir, stopped at the end."""
    kafka_env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    mongo_env = os.environ.get("MONGODB_URI")
    if kafka_env and mongo_env:
        progress(f"using the stack from the environment: {kafka_env}, {mongo_env}")
        yield Infra(kafka_env, mongo_env, "external")
        return
    state = Path(tempfile.mkdtemp(prefix="session-core-bench-"))
    # one of the two variables set: that part is used, the other started
    stack = Stack.on_free_ports(state, echo=False, external_kafka=kafka_env,
                                external_mongo=mongo_env)
    progress(f"starting a private local stack (state {state}, kafka {stack.kafka_port}, "
             f"store {stack.mongo_port})")
    t0 = time.monotonic()
    try:
        stack.up()
        progress(f"stack ready in {time.monotonic() - t0:.1f}s")
        yield Infra(stack.bootstrap, stack.mongodb_uri, "local", stack)
    finally:
        progress("stopping the private stack")
        with contextlib.suppress(Exception):
            stack.down()
        kept = keep_stack_logs(state)
        if kept:
            progress(f"the stack's GC log kept: {kept}")
        if not keep_state:
            shutil.rmtree(state, ignore_errors=True)


def keep_stack_logs(state: Path) -> Path | None:
    """The broker's GC log (pauses with wall-clock times) copied out of a private stack's state
    directory before it is removed, to put the run's stalls beside it."""
    logs = sorted((state / "logs").glob("kafka-gc.log*"))
    if not logs:
        return None
    out = Path(tempfile.mkdtemp(prefix="session-core-bench-stack-logs-"))
    for f in logs:
        shutil.copy2(f, out / f.name)
    return out


async def topics_ready(bootstrap: str, topics: Sequence[str], timeout: float = 60) -> None:  # noqa: ASYNC109
    """Wait until every partition of ``topics`` has a leader. Services started on topics that
    were created a moment ago sometimes never consume (docs/benchmarks.md, "Method"), so the runner
    creates the topics first and waits here before starting a server."""
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            described = await admin.describe_topics(list(topics))
            missing = [t["topic"] for t in described
                       if t.get("error_code") or not t.get("partitions")
                       or any(p.get("leader", -1) < 0 or p.get("error_code")
                              for p in t["partitions"])]
            if not missing:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"topics without leaders after {timeout}s: {missing}")
            await asyncio.sleep(0.5)
    finally:
        await admin.close()


async def prepare_topics(infra: Infra, tag: str) -> None:
    """Create the product's topics for ``tag`` and wait for their leaders (then settle 2 s)."""
    import asyncio

    from shared.kafka import ensure_topics
    from shared.topics import topics_for

    settings = infra.settings(tag)
    topics = topics_for(settings)
    await ensure_topics(settings, topics)
    await topics_ready(infra.bootstrap, list(topics.all()))
    await asyncio.sleep(2.0)

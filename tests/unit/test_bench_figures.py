"""``python -m bench`` (and CI's ``make bench-quick``) fails on a figure it cannot stand on — none,
NaN, infinite, a target without a ratio — and on a case that yielded no row; a missed target
alone does not fail it (bench/common.py ``run_failures``)."""

from __future__ import annotations

import pytest

import bench.__main__ as runner
from bench.common import Result, Run, run_failures, unusable

NAN, INF = float("nan"), float("inf")

# (value, baseline, target) → the start of why it is unusable ("" = usable)
ROWS = [
    ((50.0, 100.0, "<= 1.2"), ""),
    ((500.0, 100.0, "<= 1.2"), ""),  # missed, still a figure
    ((5.0, None, "info"), ""),
    ((None, 100.0, "<= 1.0"), "no figure"),
    ((NAN, 100.0, "info"), "value is nan"),
    ((NAN, 100.0, "<= 1.2"), "value is nan"),
    ((INF, 100.0, "<= 1.2"), "value is inf"),
    ((-INF, None, "info"), "value is -inf"),
    ((50.0, NAN, "<= 1.2"), "baseline is nan"),
    ((50.0, INF, "<= 1.2"), "baseline is inf"),
    ((50.0, 0.0, ">= 0.5"), "no ratio"),
    ((50.0, None, ">= 0.5"), "no ratio"),
]


@pytest.mark.parametrize(("row", "why"), ROWS)
def test_a_row_is_usable_only_as_a_finite_figure(
        row: tuple[float | None, float | None, str], why: str) -> None:
    value, baseline, target = row
    r = Result("2_pipeline_throughput", value, baseline, target, "ms")
    got = unusable(r)
    assert got.startswith(why) and bool(got) == bool(why), got
    if why and value is not None:
        assert r.verdict == "UNUSABLE"


def test_a_ratio_that_is_not_finite_is_unusable() -> None:
    assert unusable(Result("3_growth_p99_one", 5.0, 1.0, "<= 1.2", "ms", ratio=NAN)) == \
        "ratio is nan"


def ok(case: str) -> Result:
    return Result(case, 1.0, 1.0, "<= 1.2", "ms")


def test_a_case_without_a_row_fails_the_run() -> None:
    pipeline = [ok("2_pipeline_throughput"), ok("2_pipeline_cpu_per_item")]
    assert run_failures(["pipeline"], pipeline) == []
    assert run_failures(["pipeline"], pipeline[:1]) == ["pipeline: no row 2_pipeline_cpu_per_item*"]
    assert run_failures(["pipeline", "growth"], pipeline) == ["growth: no row 3_*"]
    assert run_failures(["harness"], [ok("5_codex_runtime_turn_overhead")]) == [
        "harness: no row 5_claude*"]
    assert run_failures(["admission"], []) == ["admission: no row 1*"]


def test_the_runner_exits_1_on_an_unusable_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole runner, with the admission case replaced by one that yields ``row``."""
    import bench.admission_pure as admission

    def fake(value: float) -> None:
        def run(run_: Run, quick: bool = False) -> None:
            run_.add(Result("1a_admission", value, 1.0, ">= 0.5", "validations/s"))
        monkeypatch.setattr(admission, "run", run)

    fake(NAN)
    assert runner.main(["--case", "admission", "--no-csv"]) == 1
    fake(INF)
    assert runner.main(["--case", "admission", "--no-csv"]) == 1
    fake(0.7)
    assert runner.main(["--case", "admission", "--no-csv"]) == 0

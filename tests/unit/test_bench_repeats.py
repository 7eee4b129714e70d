"""``python -m bench --repeat N``: each figure's median over the repeats, with its min–max, and
the target judged on the median (bench/common.py ``medians``); one row per repeat plus the
medians in bench/results.csv, whose older nine-column header is moved to the new one; the
results section of docs/benchmarks.md rendered from those rows (bench/report.py)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

import bench.__main__ as runner
from bench import common, report
from bench.common import CSV_FIELDS, Result, Run, medians, write_rows

OLD_HEADER = "date,commit,case,value,baseline,ratio,target,unit,notes"


def runs_of(*rows: list[Result]) -> list[Run]:
    out = []
    for k, results in enumerate(rows, 1):
        run = Run(date="d", commit="c", repeat=k, repeats=len(rows))
        run.results = results
        out.append(run)
    return out


def test_the_target_is_judged_on_the_median_ratio_not_on_one_repeat() -> None:
    runs = runs_of([Result("2_pipeline_throughput", 100.0, 100.0, ">= 0.6", "Items/s")],
                   [Result("2_pipeline_throughput", 30.0, 100.0, ">= 0.6", "Items/s")],
                   [Result("2_pipeline_throughput", 70.0, 100.0, ">= 0.6", "Items/s")])
    (m,) = medians(runs)
    assert m.ratio == pytest.approx(0.7) and m.value == 70.0 and m.n == 3
    assert m.ratio_range == (pytest.approx(0.3), pytest.approx(1.0))
    assert m.value_range == (30.0, 100.0)
    assert m.verdict == "met"  # one repeat at 0.3 does not decide it
    runs[2].results[0] = Result("2_pipeline_throughput", 50.0, 100.0, ">= 0.6", "Items/s")
    assert medians(runs)[0].verdict == "MISSED"


def test_the_median_ratio_is_the_median_of_the_ratios_not_of_values_over_baselines() -> None:
    runs = runs_of([Result("x", 10.0, 10.0, "<= 1.2", "ms")],
                   [Result("x", 30.0, 20.0, "<= 1.2", "ms")],
                   [Result("x", 40.0, 50.0, "<= 1.2", "ms")])
    (m,) = medians(runs)
    assert (m.value, m.baseline) == (30.0, 20.0)  # 30/20 = 1.5 would miss
    assert m.ratio == pytest.approx(1.0) and m.verdict == "met"


def test_an_invalid_repeat_is_left_out_and_failures_in_any_repeat_count() -> None:
    def row(value: float, invalid: str = "", failed: int = 0) -> Result:
        return Result("3_growth_p99_one", value, 10.0, "<= 1.2", "ms", failed=failed,
                      invalid=invalid)

    (m,) = medians(runs_of([row(5.0, invalid="the small phase stalled")], [row(11.0)],
                           [row(12.0)]))
    assert m.n == 2 and m.ratio == pytest.approx(1.15) and m.verdict == "met"
    assert "1 left out" in m.notes
    (m,) = medians(runs_of([row(10.0)], [row(10.0, failed=3)], [row(10.0)]))
    assert m.failed == 3 and m.verdict == "MISSED"
    (m,) = medians(runs_of([row(5.0, invalid="stalled")], [row(5.0, invalid="stalled")]))
    assert m.n == 0 and m.verdict == "INVALID"


def test_an_older_results_file_gets_the_new_header_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "results.csv"
    old_rows = (b'2026-12-01,abc,1a,1,2,0.5000,>= 0.5,x/s,"old note, with a comma"\r\n'
                b"2026-12-02,abd,1a,1,2,0.5000,>= 0.5,x/s,second\r\n")
    path.write_bytes(OLD_HEADER.encode() + b"\r\n" + old_rows)  # as csv.writer writes
    r = Result("1a", 3.0, 2.0, ">= 0.5", "x/s", n=3, value_range=(1.0, 4.0),
               ratio_range=(0.5, 2.0))
    write_rows(path, "2026-12-06", "def", [r], "median")
    write_rows(path, "2026-12-06", "def", [r], "median")  # the header is moved once
    data = path.read_bytes()
    assert data.startswith(",".join(CSV_FIELDS).encode() + b"\r\n" + old_rows)  # byte for byte
    lines = data.decode().splitlines()
    assert len(lines) == 5
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["repeat"] is None and rows[0]["notes"] == "old note, with a comma"
    assert rows[2]["repeat"] == "median" and rows[2]["n"] == "3"
    assert (rows[2]["ratio_min"], rows[2]["ratio_max"]) == ("0.5000", "2.0000")
    assert rows[2]["verdict"] == "met"


def test_the_runner_repeats_writes_each_repeat_and_the_medians_and_renders_them(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import bench.admission_pure as admission

    values = iter([0.4, 0.9, 0.6])

    def run(run_: Run, quick: bool = False) -> None:
        run_.add(Result("1a_admission_text_1part", next(values), 1.0, ">= 0.5",
                        "validations/s"))

    monkeypatch.setattr(admission, "run", run)
    path = tmp_path / "results.csv"
    path.write_text(OLD_HEADER + "\n")
    monkeypatch.setattr(common, "RESULTS_CSV", path)
    assert runner.main(["--case", "admission", "--repeat", "3"]) == 0
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["repeat"] for r in rows] == ["1", "2", "3", "median", "median"]
    med = rows[3]
    assert med["case"] == "1a_admission_text_1part" and med["ratio"] == "0.6000"
    assert (med["ratio_min"], med["ratio_max"], med["n"]) == ("0.4000", "0.9000", "3")
    assert med["verdict"] == "met" and rows[0]["verdict"] == "MISSED"
    assert rows[4]["case"] == "0_run" and "load average" in rows[4]["notes"]
    section = report.render(report.load(path), report.latest_repeated(report.load(path)) or "")
    assert "medians of 3 repeats" in section
    line = next(ln for ln in section.splitlines() if ln.startswith("| 1a admission"))
    assert "0.600" in line and "0.400–0.900" in line and "| met |" in line
    doc = tmp_path / "benchmarks.md"
    doc.write_text(f"# B\n\nmethod\n\n{report.BEGIN}\nold numbers\n{report.END}\n\nmore\n")
    report.write_doc(path=doc, rows_from=path)
    text = doc.read_text()
    assert "old numbers" not in text and "0.400–0.900" in text and text.endswith("more\n")


def test_a_repeat_with_an_unusable_figure_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.admission_pure as admission

    values = iter([0.7, float("nan"), 0.7])

    def run(run_: Run, quick: bool = False) -> None:
        run_.add(Result("1a_admission_text_1part", next(values), 1.0, ">= 0.5",
                        "validations/s"))

    monkeypatch.setattr(admission, "run", run)
    assert runner.main(["--case", "admission", "--repeat", "3", "--no-csv"]) == 1


def test_a_repeat_that_raises_fails_the_run_and_the_others_still_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.admission_pure as admission

    calls = []

    def run(run_: Run, quick: bool = False) -> None:
        calls.append(run_.repeat)
        if run_.repeat == 2:
            raise RuntimeError("the stack did not start")
        run_.add(Result("1a_admission_text_1part", 0.7, 1.0, ">= 0.5", "validations/s"))

    monkeypatch.setattr(admission, "run", run)
    assert runner.main(["--case", "admission", "--repeat", "3", "--no-csv"]) == 1
    assert calls == [1, 2, 3]


def test_a_sigterm_ends_the_run_with_the_rows_so_far_written(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A stopped run (CI's timeout, a kill) stops its stacks and writes what it measured:
    the SIGTERM ends it as Ctrl-C does, and the run fails."""
    import os
    import signal

    import bench.admission_pure as admission

    def run(run_: Run, quick: bool = False) -> None:
        if run_.repeat == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        run_.add(Result("1a_admission_text_1part", 0.7, 1.0, ">= 0.5", "validations/s"))

    monkeypatch.setattr(admission, "run", run)
    path = tmp_path / "results.csv"
    monkeypatch.setattr(common, "RESULTS_CSV", path)
    handler = signal.getsignal(signal.SIGTERM)
    assert runner.main(["--case", "admission", "--repeat", "3"]) == 1
    assert signal.getsignal(signal.SIGTERM) == handler  # the runner's handler is gone
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["repeat"] for r in rows] == ["1", "median", "median"]
    assert "interrupted" in rows[2]["notes"]


def test_the_page_shows_each_cases_latest_repeated_run(tmp_path: Path) -> None:
    """A case measured again alone (``--case growth --repeat 3``) replaces that case's rows on
    the page and leaves the others' from the earlier run, and the page says so."""
    path = tmp_path / "results.csv"

    def run(date: str, commit: str, cases: list[str], ratio: float) -> None:
        rows = [Result(c, ratio, 1.0, "<= 1.2", "ms", n=3, ratio_range=(ratio, ratio))
                for c in cases]
        write_rows(path, date, commit, rows, "median")
        write_rows(path, date, commit, [Result("0_run", 10.0, None, "info", "s",
                                               f"run {commit}")], "median")

    run("2026-12-06T17:35", "aaa", ["1a_admission_text_1part", "3_growth_p99_one"], 0.5)
    run("2026-12-06T17:57", "bbb", ["3_growth_p99_one"], 0.9)
    text = report.render_latest(report.load(path))
    assert "cases 1 from the run of 2026-12-06T17:35" in text
    assert "cases 3 from the run of 2026-12-06T17:57" in text
    growth = [ln for ln in text.splitlines() if ln.startswith("| 3 growth p99, one Session, 10⁵")]
    assert len(growth) == 1 and "0.900" in growth[0]  # the later run's, once
    assert "run aaa" in text and "run bbb" in text
    run("2026-12-06T19:00", "ccc", ["1a_admission_text_1part", "3_growth_p99_one"], 1.1)
    text = report.render_latest(report.load(path))
    assert "not one run" not in text and text.count("### Run at") == 1 and "ccc" in text

"""The bench's CPU diagnostics (bench/cpu.py; ``CpuSampler.window`` is the receipts case's): the
machine's CPU pressure is read from ``/proc/pressure/cpu`` and reported beside the cores each
process used, never summed into them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import cpu
from bench.cpu import WAIT, CpuSampler

PSI = ("some avg10=12.50 avg60=3.00 avg300=1.00 total=2500000\n"
       "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_the_pressure_is_the_some_line_total_in_seconds(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "cpu"
    f.write_text(PSI)
    monkeypatch.setattr(cpu, "PRESSURE", f)
    assert cpu._waited_s() == 2.5
    monkeypatch.setattr(cpu, "PRESSURE", tmp_path / "absent")  # no PSI: nothing, no error
    assert cpu._waited_s() is None


def sampler() -> CpuSampler:
    s = CpuSampler({"product": 1, "store": 2})
    s.rows = [(10.0, {"product": 0.5, "store": 0.25, WAIT: 0.4}),
              (11.0, {"product": 0.75, "store": 0.25, WAIT: 0.6}),
              (12.0, {"product": 0.25, "store": 0.25, WAIT: 0.2})]
    return s


def test_a_phase_sums_the_processes_and_reports_the_pressure_beside_them() -> None:
    line = sampler().phase()
    assert "product 0.50 (max 0.75)" in line
    assert "together 0.75 (max 1.00)" in line  # the pressure is not a process
    assert "cpu pressure (a task waiting for a core) 40% of the time (max 60% of a second)" \
        in line


def test_the_receipts_window_takes_the_seconds_between_its_times() -> None:
    out = sampler().window(10.5, 11.2)
    assert out["seconds"] == 2  # the rows at 11.0 and 12.0: the seconds (10, 11] and (11, 12]
    assert out["product"] == {"mean": 0.5, "max": 0.75}
    assert out["together_per_second"] == [1.0, 0.5]
    assert out["cpu_pressure_per_second"] == [0.6, 0.2]
    assert sampler().window(10.5, 11.0)["seconds"] == 1  # (11, 12] starts after it
    assert sampler().window(20.0, 30.0) == {}


def test_the_csv_has_a_pressure_column(tmp_path: Path) -> None:
    path = tmp_path / "cpu.csv"
    sampler().write_csv(path)
    lines = path.read_text().splitlines()
    assert lines[0] == f"t_s,product,store,{WAIT}"
    assert lines[2] == "1.0,0.750,0.250,0.600"

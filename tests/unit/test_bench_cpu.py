"""The bench's CPU diagnostics (bench/cpu.py; ``CpuSampler.window`` is the receipts case's): the
machine's CPU pressure is read from ``/proc/pressure/cpu`` and reported beside the cores each
process used, never summed into them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import cpu
from bench.cpu import IO_FULL, IO_WAIT, STEAL, WAIT, CpuSampler
from tests.support.skips import unavailable

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
    assert lines[0] == f"t_s,product,store,{WAIT},{IO_WAIT},{IO_FULL},{STEAL},epoch_s"
    assert lines[2].startswith("1.0,0.750,0.250,0.600,0.000,0.000,0.000,")
    first, second = (float(ln.rsplit(",", 1)[1]) for ln in lines[1:3])
    assert second - first == pytest.approx(1.0, abs=0.11)  # wall-clock, one row per second


def test_the_disk_pressure_is_read_beside_the_cpu_pressure_and_not_summed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "io"
    f.write_text(PSI.replace("full avg10=0.00 avg60=0.00 avg300=0.00 total=0",
                             "full avg10=1.00 avg60=0.00 avg300=0.00 total=1250000"))
    monkeypatch.setattr(cpu, "IO_PRESSURE", f)
    assert cpu._pressures()[IO_WAIT] == 2.5
    assert cpu._pressures()[IO_FULL] == 1.25
    s = sampler()
    s.rows = [(t, {**c, IO_WAIT: 0.5, IO_FULL: 0.25}) for t, c in s.rows]
    line = s.phase()
    assert "together 0.75 (max 1.00)" in line
    assert "io pressure (a task waiting for the disk) 50% (max 50% of a second)" in line
    assert s.window(10.5, 11.2)["io_pressure_per_second"] == [0.5, 0.5]


MEMINFO = ("MemTotal:       24684116 kB\nDirty:             20480 kB\n"
           "Writeback:         10240 kB\nWritebackTmp:          0 kB\n")


def test_unwritten_pages_are_dirty_plus_writeback(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "meminfo"
    f.write_text(MEMINFO)
    monkeypatch.setattr(cpu, "MEMINFO", f)
    assert cpu._unwritten_mb() == 30.0  # WritebackTmp is not Writeback
    monkeypatch.setattr(cpu, "MEMINFO", tmp_path / "absent")
    assert cpu._unwritten_mb() is None


def test_quiesce_syncs_then_waits_for_a_quiet_second(monkeypatch: pytest.MonkeyPatch) -> None:
    totals = iter([0.0, 0.9, 1.5, 1.55])  # seconds waited: busy, busy, then a quiet second
    calls: list[str] = []
    monkeypatch.setattr(cpu, "_waited_s", lambda: next(totals))
    monkeypatch.setattr(cpu, "_unwritten_mb", lambda: 512.0)
    monkeypatch.setattr(cpu.os, "sync", lambda: calls.append("sync"))
    monkeypatch.setattr(cpu.time, "sleep", lambda s: calls.append("sleep"))
    out = cpu.quiesce(max_s=60.0)
    assert calls == ["sync", "sleep", "sleep", "sleep"]  # stops at the first quiet second
    assert "unwritten pages 512 MB before sync" in out
    assert "the last second's cpu pressure 5%" in out and "gave up" not in out


def test_quiesce_gives_up_after_max_s(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 1000, 10))  # ten seconds pass per reading
    monkeypatch.setattr(cpu.time, "monotonic", lambda: float(next(clock)))
    totals = iter(x * 0.5 for x in range(100))  # never quiet: half of every second waited
    monkeypatch.setattr(cpu, "_waited_s", lambda: next(totals))
    monkeypatch.setattr(cpu, "_unwritten_mb", lambda: None)
    monkeypatch.setattr(cpu.os, "sync", lambda: None)
    monkeypatch.setattr(cpu.time, "sleep", lambda s: None)
    out = cpu.quiesce(max_s=30.0)
    assert "(gave up waiting)" in out and "unwritten pages unknown" in out


def test_quiesce_without_a_pressure_reading_only_syncs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(cpu, "_waited_s", lambda: None)
    monkeypatch.setattr(cpu, "_unwritten_mb", lambda: 3.0)
    monkeypatch.setattr(cpu.os, "sync", lambda: calls.append("sync"))
    monkeypatch.setattr(cpu.time, "sleep", lambda s: calls.append("sleep"))
    out = cpu.quiesce()
    assert calls == ["sync"]
    assert "no cpu pressure reading: not waited for a quiet second" in out
    assert "gave up" not in out


def test_a_private_stacks_gc_log_is_kept_before_its_state_dir_goes(tmp_path: Path) -> None:
    from bench.common import keep_stack_logs

    state = tmp_path / "state"
    assert keep_stack_logs(state) is None  # nothing to keep: no directory made
    (state / "logs").mkdir(parents=True)
    (state / "logs" / "kafka-gc.log").write_text("[t][1.0s][info] GC(0) Pause Young 3.1ms\n")
    (state / "logs" / "kafka-gc.log.0").write_text("older\n")
    (state / "logs" / "kafka.log").write_text("not a GC log\n")
    kept = keep_stack_logs(state)
    assert kept is not None and kept != state / "logs"
    assert sorted(p.name for p in kept.iterdir()) == ["kafka-gc.log", "kafka-gc.log.0"]
    assert (kept / "kafka-gc.log").read_text().endswith("3.1ms\n")
    shutil.rmtree(kept)


STAT = ("cpu  4426844 15384 870219 10455242 122595 0 81641 98162 0 0\n"
        "cpu0 2075017 7856 401134 5433572 30418 0 35814 49434 0 0\n")


def test_the_stolen_time_is_read_from_proc_stat_and_not_summed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "stat"
    f.write_text(STAT)
    monkeypatch.setattr(cpu, "STAT", f)
    monkeypatch.setattr(cpu, "TICKS", 100)
    assert cpu._stolen_s() == pytest.approx(981.62)  # the 8th number of the "cpu" line
    assert cpu._pressures()[STEAL] == pytest.approx(981.62)
    monkeypatch.setattr(cpu, "STAT", tmp_path / "absent")
    assert cpu._stolen_s() is None
    s = sampler()
    s.rows = [(t, {**c, STEAL: x}) for (t, c), x in zip(s.rows, (0.0, 0.3, 0.1), strict=True)]
    line = s.phase()
    assert "together 0.75 (max 1.00)" in line  # steal is not a process
    assert "stolen by the hypervisor 0.13 cores (max 0.30 in a second)" in line
    assert s.last_steal == pytest.approx(0.4 / 3)  # what the growth case notes per phase
    assert s.phase() == "cpu: no samples" and s.last_steal is None
    assert s.window(10.5, 11.2)["steal_cores_per_second"] == [0.3, 0.1]



BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.4: pass\n"


def test_a_servers_cpu_counts_its_descendants_alive_and_reaped() -> None:
    """CPU per Item counts all of a server's processes (admission's parse pool is a child of
    the product's process): ``tree_cpu_s`` adds the descendants' CPU to the process's own, and
    keeps a child's once it has exited and been reaped."""
    if not Path("/proc/self/stat").exists():
        unavailable("reads /proc (Linux)")
    import os
    import subprocess
    import sys
    import time

    me = os.getpid()
    own0, tree0 = cpu.process_cpu_s(me), cpu.tree_cpu_s(me)
    assert own0 is not None and tree0 is not None
    child = subprocess.Popen([sys.executable, "-c", BURN + "time.sleep(30)\n"])
    try:
        alive = tree0
        for _ in range(200):  # until the child has burnt its 0.4 s (alive, sleeping)
            alive = cpu.tree_cpu_s(me) or 0.0
            if alive - tree0 >= 0.35:
                break
            time.sleep(0.05)
        own = cpu.process_cpu_s(me)
        assert own is not None and own - own0 < 0.3  # not this process's own time
        assert alive - tree0 >= 0.35
    finally:
        child.kill()
        child.wait()
    before = cpu.tree_cpu_s(me)
    assert before is not None
    subprocess.run([sys.executable, "-c", BURN], check=True)  # exits, reaped
    after = cpu.tree_cpu_s(me)
    assert after is not None and after - before >= 0.35
    assert cpu.tree_cpu_s(2**22 + 12345) is None  # no such process
    assert cpu.cpu_spent({"a": 1.0, "b": None}, {"a": 1.5, "b": 2.0}) == {"a": 0.5, "b": None}

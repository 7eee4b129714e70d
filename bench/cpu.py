"""Who used the two cores during a measured phase: CPU time of the product, the broker and the
store (and the bench itself), sampled from ``/proc/<pid>/stat`` once a second by a thread. A
diagnostic printed beside a case's figures (docs/benchmarks.md), not a figure: it says which
process was busy when latency grew. Beside them, the machine's CPU pressure (``/proc/pressure/cpu``,
"some": the share of each second in which at least one runnable task waited for a core) — how
long work queued for the two cores, which a sum of cores used below 2.0 does not show (several
processes bursting at once). And the CPU time the hypervisor gave to other guests while this
machine's tasks were runnable (``/proc/stat``, "steal"): these VMs' two cores are not always
theirs, and a second with steal is a second the product ran on less than two cores. Linux only;
elsewhere it reports nothing."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PRESSURE = Path("/proc/pressure/cpu")
IO_PRESSURE = Path("/proc/pressure/io")
WAIT = "cpu wait"  # the pressure's key in a row: seconds waited for a core per second
# the disk's pressure in a row: seconds in which some task / every non-idle task waited for I/O
IO_WAIT, IO_FULL = "io wait", "io full"
# cores (summed over the machine's) the hypervisor ran other guests on: /proc/stat "steal"
STEAL = "steal"
PRESSURES = (WAIT, IO_WAIT, IO_FULL, STEAL)  # a row's keys that are not processes
STAT = Path("/proc/stat")


def _waited_s(path: Path | None = None, line: int = 0) -> float | None:
    """Seconds, since boot, in which some runnable task waited for a core (PSI "some"); with
    ``IO_PRESSURE``, for I/O (line 0 "some", line 1 "full")."""
    try:
        some = (path or PRESSURE).read_text().splitlines()[line]
    except (OSError, IndexError):
        return None
    total = some.rsplit("total=", 1)[-1]
    return int(total) / 1e6 if total.isdigit() else None


def _stolen_s() -> float | None:
    """CPU seconds, since boot and summed over the cores, the hypervisor gave to others (the
    eighth number of ``/proc/stat``'s ``cpu`` line)."""
    try:
        fields = STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu" or not fields[8].isdigit():
        return None
    return int(fields[8]) / TICKS


def _pressures() -> dict[str, float | None]:
    return {WAIT: _waited_s(), IO_WAIT: _waited_s(IO_PRESSURE, 0),
            IO_FULL: _waited_s(IO_PRESSURE, 1), STEAL: _stolen_s()}


MEMINFO = Path("/proc/meminfo")


def _unwritten_mb() -> float | None:
    """Pages written by some process and not on the disk yet (``Dirty`` + ``Writeback``), MB."""
    try:
        lines = MEMINFO.read_text().splitlines()
    except OSError:
        return None
    kb = [int(v.split()[0]) for k, _, v in (ln.partition(":") for ln in lines)
          if k in ("Dirty", "Writeback")]
    return sum(kb) / 1024 if kb else None


def quiesce(max_s: float | None = None, quiet_below: float = 0.10) -> str:
    """Before a measured phase that follows the bench's own bulk writes: write them to the disk
    (``sync``), then wait for a second in which runnable tasks waited for a core less than
    ``quiet_below`` of it (the flush, the store's and the broker's background work done), at
    most ``max_s``. Blocking (call it in a thread); returns what it found, for the log."""
    if max_s is None:  # BENCH_QUIESCE_MAX_S: e.g. 5 for a smoke on a busy machine
        max_s = float(os.environ.get("BENCH_QUIESCE_MAX_S") or 60.0)
    t0 = time.monotonic()
    dirty = _unwritten_mb()
    os.sync()
    synced = time.monotonic() - t0
    waited, last = None, _waited_s()
    while last is not None and time.monotonic() - t0 < max_s:
        time.sleep(1.0)
        now = _waited_s()
        if now is None:
            break
        waited, last = now - last, now
        if waited < quiet_below:
            break
    took = time.monotonic() - t0
    found = "unknown" if dirty is None else f"{dirty:.0f} MB"
    if waited is None:
        calm = "no cpu pressure reading: not waited for a quiet second"
    else:
        gave_up = "" if waited < quiet_below else " (gave up waiting)"
        calm = f"the last second's cpu pressure {waited:.0%}{gave_up}"
    return (f"settled in {took:.1f}s: unwritten pages {found} before sync ({synced:.1f}s); "
            f"{calm}")


def process_cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) of a process and every descendant alive now, plus what its
    and their reaped children spent (``cutime`` + ``cstime``): all a server's processes (e.g.
    admission's parse pool) cost. None when ``pid`` is gone."""
    stats: dict[int, tuple[int, float]] = {}  # pid → (parent, cpu s with reaped children)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        cpu = sum(int(x) for x in fields[11:15]) / TICKS  # utime stime cutime cstime
        stats[int(entry.name)] = (int(fields[1]), cpu)
    if pid not in stats:
        return None
    children: dict[int, list[int]] = {}
    for child, (parent, _) in stats.items():
        children.setdefault(parent, []).append(child)
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += stats[p][1]
        todo += children.get(p, [])
    return total


def cpu_snapshot(trees: dict[str, int], processes: dict[str, int]) -> dict[str, float | None]:
    """CPU seconds so far: each of ``trees`` with its descendants (``tree_cpu_s``), each of
    ``processes`` alone."""
    out = {name: tree_cpu_s(pid) for name, pid in trees.items()}
    out.update({name: process_cpu_s(pid) for name, pid in processes.items()})
    return out


def cpu_spent(before: dict[str, float | None], after: dict[str, float | None]
              ) -> dict[str, float | None]:
    """CPU seconds each name spent between two ``cpu_snapshot``s (None when either is)."""
    return {n: (after[n] - b) if b is not None and after.get(n) is not None else None  # type: ignore[operator]
            for n, b in before.items()}


def _cmdlines() -> dict[int, list[str]]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            out[int(entry.name)] = raw.decode(errors="replace").split("\0")
    return out


def stack_pids(store_uri: str) -> dict[str, int]:
    """The store's pid (FerretDB listening on the port of ``store_uri``) and the broker's (the
    Kafka process started from the same state dir, else the only one running)."""
    store_port = urlsplit(store_uri).port or 27017
    found: dict[str, int] = {}
    cmds = _cmdlines()
    root = None
    for pid, cmd in cmds.items():
        if "ferretdb" in cmd[0] and f"127.0.0.1:{store_port}" in cmd:
            found["store"] = pid
            if "-sqlite-dir" in cmd:
                root = cmd[cmd.index("-sqlite-dir") + 1].rsplit("/ferretdb/", 1)[0]
    brokers = [pid for pid, cmd in cmds.items() if "kafka.Kafka" in cmd]
    mine = [pid for pid in brokers if root and any(root in c for c in cmds[pid])]
    if mine or len(brokers) == 1:
        found["broker"] = (mine or brokers)[0]
    return found


class CpuSampler:
    """``start()`` … ``phase()``: the cores each process used since the last ``phase()`` (mean)
    and in its busiest second, plus the per-second rows kept in ``rows``."""

    def __init__(self, pids: dict[str, int], period_s: float = 1.0) -> None:
        self.pids = pids
        self.period = period_s
        # (time, cores per process and the CPU pressure under ``WAIT``)
        self.rows: list[tuple[float, dict[str, float]]] = []
        self._mark = 0
        self.last_steal: float | None = None  # the last ``phase()``'s mean cores stolen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpu-sampler")

    def start(self) -> CpuSampler:
        if Path("/proc/self/stat").exists():
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        last = {n: process_cpu_s(p) for n, p in self.pids.items()}
        last.update(_pressures())
        t_last = time.monotonic()
        while not self._stop.wait(self.period):
            now = {n: process_cpu_s(p) for n, p in self.pids.items()}
            now.update(_pressures())
            t = time.monotonic()
            cores = {n: (now[n] - last[n]) / (t - t_last)  # type: ignore[operator]
                     for n in now if now[n] is not None and last.get(n) is not None}
            self.rows.append((t, cores))
            last, t_last = now, t

    def phase(self) -> str:
        """The rows since the previous call, summed up as one line."""
        rows, self._mark = self.rows[self._mark:], len(self.rows)
        if not rows:
            self.last_steal = None
            return "cpu: no samples"
        per, total, waits, io, steal = self._summary(rows)
        self.last_steal = sum(steal) / len(steal) if steal else None
        parts = [f"{name} {mean:.2f} (max {top:.2f})" for name, (mean, top) in per.items()]
        pressure = (f"; cpu pressure (a task waiting for a core) {sum(waits) / len(waits):.0%} "
                    f"of the time (max {max(waits):.0%} of a second)") if waits else ""
        if io:
            pressure += (f"; io pressure (a task waiting for the disk) {sum(io) / len(io):.0%} "
                         f"(max {max(io):.0%} of a second)")
        if steal:
            pressure += (f"; stolen by the hypervisor {sum(steal) / len(steal):.2f} cores "
                         f"(max {max(steal):.2f} in a second)")
        return (f"cpu cores, mean (busiest second) over {len(rows)} s: " + ", ".join(parts)
                + f"; together {sum(total) / len(total):.2f} (max {max(total):.2f})"
                + pressure)

    def window(self, t_from: float, t_to: float) -> dict[str, Any]:
        """The seconds overlapping the monotonic times [t_from, t_to] (a row at t holds the
        second (t - period, t]): each process's cores (mean, busiest second), and per second all
        of them together and the CPU pressure."""
        rows = [c for t, c in self.rows if t > t_from and t - self.period < t_to]
        if not rows:
            return {}
        per, total, waits, io, steal = self._summary([(0.0, c) for c in rows])
        out: dict[str, Any] = {"seconds": len(rows)}
        out.update({name: {"mean": round(mean, 2), "max": round(top, 2)}
                    for name, (mean, top) in per.items()})
        out["together_per_second"] = [round(x, 2) for x in total]
        out["cpu_pressure_per_second"] = [round(x, 2) for x in waits]
        if io:
            out["io_pressure_per_second"] = [round(x, 2) for x in io]
        if steal:
            out["steal_cores_per_second"] = [round(x, 2) for x in steal]
        return out

    def _summary(self, rows: list[tuple[float, dict[str, float]]]
                 ) -> tuple[dict[str, tuple[float, float]], list[float], list[float],
                            list[float], list[float]]:
        """Per process (mean, max) cores; per row all processes together; per row the CPU
        pressure; per row the disk pressure ("some"); per row the cores stolen."""
        per = {}
        for name in self.pids:
            vals = [c[name] for _, c in rows if name in c]
            if vals:
                per[name] = (sum(vals) / len(vals), max(vals))
        total = [sum(v for n, v in c.items() if n not in PRESSURES) for _, c in rows]
        waits = [c[WAIT] for _, c in rows if WAIT in c]
        io = [c[IO_WAIT] for _, c in rows if IO_WAIT in c]
        steal = [c[STEAL] for _, c in rows if STEAL in c]
        return per, total, waits, io, steal

    def write_csv(self, path: Path) -> None:
        """Every second's cores per process and the pressures (time in seconds since the first
        sample, and the wall-clock time last)."""
        names = [*self.pids, *PRESSURES]
        t0 = self.rows[0][0] if self.rows else 0.0
        epoch = time.time() - time.monotonic()  # a row's wall-clock time, to meet other logs
        lines = ["t_s," + ",".join(names) + ",epoch_s"]
        lines += [f"{t - t0:.1f}," + ",".join(f"{c.get(n, 0.0):.3f}" for n in names)
                  + f",{t + epoch:.1f}" for t, c in self.rows]
        path.write_text("\n".join(lines) + "\n")

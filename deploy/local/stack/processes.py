"""Start, watch and stop processes under a state directory: ``<state>/pids/<name>.json`` records
each process with its start time (guards against PID reuse) and its process group (one each, so
a stop takes the children too); ``<state>/logs/<name>.log`` gets its output."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .base import INFRA, StackError, log, write


def _proc_start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    if rest[0] == "Z":  # zombie: as good as gone
        return None
    return int(rest[19])


def proc_stats() -> Iterator[tuple[int, list[str]]]:
    """Every process's pid and the fields of its ``/proc/<pid>/stat`` after the command name
    (the state first: ``rest[2]`` is the process group, ``rest[11]``/``rest[12]`` the user and
    system CPU ticks); one that ended meanwhile is passed over."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        yield int(d.name), stat[stat.rindex(")") + 2:].split()


def _group_members(pgid: int) -> list[int]:
    return [pid for pid, rest in proc_stats() if int(rest[2]) == pgid and rest[0] != "Z"]


@dataclass
class Proc:
    name: str
    pid: int
    pgid: int
    start: int
    cmd: list[str]
    log: str
    url: str = ""  # health/API base URL: readiness is GET {url}/readyz
    log_offset: int = 0  # where this run's output starts in the log file

    def alive(self) -> bool:
        return _proc_start_ticks(self.pid) == self.start

    def group_alive(self) -> bool:
        return bool(_group_members(self.pgid)) and (self.alive() or self._group_is_ours())

    def _group_is_ours(self) -> bool:
        # the leader is gone; the group id still identifies children we started, as long as it
        # has not been recycled — a recycled pgid would have a new leader with pid == pgid
        return _proc_start_ticks(self.pgid) is None


@dataclass
class Component:
    """What to start and how to tell that it is ready."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    ready: Callable[[], bool]
    ready_timeout: float
    kind: str  # infra | service
    cwd: Path | None = None
    url: str = ""
    describe: str = ""
    min_alive: float = 0.0  # ready only after this long alive (commands without a health URL)


@dataclass
class State:
    root: Path
    data: dict[str, object] = field(default_factory=dict)

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    def load(self) -> State:
        f = self.root / "stack.json"
        if f.exists():
            self.data = json.loads(f.read_text())
        return self

    def save(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "stack.json").write_text(json.dumps(self.data, indent=2) + "\n")

    def proc(self, name: str) -> Proc | None:
        f = self.pids / f"{name}.json"
        if not f.exists():
            return None
        try:
            return Proc(**json.loads(f.read_text()))
        except (ValueError, TypeError):
            return None

    def procs(self) -> list[Proc]:
        if not self.pids.exists():
            return []
        out = [self.proc(f.stem) for f in sorted(self.pids.glob("*.json"))]
        return [p for p in out if p is not None]


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # started by this process: reaped by it


def start_process(state: State, comp: Component) -> Proc:
    state.logs.mkdir(parents=True, exist_ok=True)
    state.pids.mkdir(parents=True, exist_ok=True)
    logf = state.logs / f"{comp.name}.log"
    env = dict(os.environ)
    env.update(comp.env)
    with open(logf, "ab") as out:
        offset = out.tell()
        out.write(f"\n=== {time.strftime('%Y-%m-%dT%H:%M:%S')} starting: {shlex.join(comp.cmd)}\n"
                  .encode())
        out.flush()
        p = subprocess.Popen(comp.cmd, cwd=comp.cwd, env=env, stdin=subprocess.DEVNULL,
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    start = None
    for _ in range(50):
        start = _proc_start_ticks(p.pid)
        if start is not None:
            break
        time.sleep(0.01)
    _CHILDREN[p.pid] = p
    proc = Proc(comp.name, p.pid, p.pid, start or -1, comp.cmd, str(logf), comp.url, offset)
    (state.pids / f"{comp.name}.json").write_text(json.dumps(proc.__dict__) + "\n")
    return proc


def wait_ready(comp: Component, proc: Proc, t_start: float) -> None:
    t0 = time.monotonic()
    deadline = t0 + comp.ready_timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            tail = Path(proc.log).read_text(errors="replace").splitlines()[-30:]
            write("\n".join(f"  {comp.name}| {line}" for line in tail) + "\n")
            raise StackError(f"{comp.name} exited during start-up; log: {proc.log}")
        if time.monotonic() - t0 >= comp.min_alive and comp.ready():
            log(f"{comp.name}: ready at +{time.monotonic() - t_start:.1f}s — {comp.describe}")
            return
        time.sleep(0.25)
    raise StackError(f"{comp.name} not ready after {comp.ready_timeout:.0f}s; log: {proc.log}")


def _signal_group(proc: Proc, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pgid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(procs: Sequence[Proc], timeout: float, step: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_group_members(p.pgid) for p in procs):
        time.sleep(step)


def stop_many(state: State, procs: Sequence[Proc], timeout: float,
              first: signal.Signals = signal.SIGTERM) -> None:
    """SIGTERM (or ``first``: SIGKILL for a crash) every process group at once, wait up to
    ``timeout``, SIGKILL what is left, and wait until no member of any group is left (reaping
    our own children)."""
    live = []
    for proc in procs:
        if proc.group_alive():
            live.append(proc)
        else:
            (state.pids / f"{proc.name}.json").unlink(missing_ok=True)
    if not live:
        return
    for proc in live:
        log(f"{proc.name}: {first.name} to process group {proc.pgid}")
        _signal_group(proc, first)
    _wait_gone(live, timeout, 0.1)
    for proc in live:
        left = _group_members(proc.pgid)
        if left:
            log(f"{proc.name}: still running after {timeout:.0f}s ({left}); SIGKILL")
            _signal_group(proc, signal.SIGKILL)
    _wait_gone(live, 5, 0.05)
    for proc in live:
        if _group_members(proc.pgid):
            raise StackError(f"{proc.name}: process group {proc.pgid} survived SIGKILL")
        child = _CHILDREN.pop(proc.pid, None)
        if child is not None:
            child.wait(timeout=5)  # ours: reap it now
        else:
            # started by another process, so init reaps it; wait briefly so `ps` shows no zombie
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and Path(f"/proc/{proc.pid}").exists():
                time.sleep(0.05)
        (state.pids / f"{proc.name}.json").unlink(missing_ok=True)
        log(f"{proc.name}: stopped")


def stop_in_order(state: State, procs: Sequence[Proc], timeout: float,
                  first: signal.Signals = signal.SIGTERM) -> None:
    """Services (and extra commands) first, then the infrastructure."""
    stop_many(state, [p for p in procs if p.name not in INFRA], timeout, first)
    stop_many(state, [p for p in procs if p.name in INFRA], timeout, first)

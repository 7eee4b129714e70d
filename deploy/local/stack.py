#!/usr/bin/env python3
"""Local real stack for Session Core: Apache Kafka (KRaft, one node) + FerretDB (SQLite backend)
and, optionally, the four services. No Docker, standard library only (it runs before the venv).

    python3 deploy/local/stack.py install              # fetch Kafka jars, build FerretDB (cached)
    python3 deploy/local/stack.py venv                 # the project's venv outside the repo
    python3 deploy/local/stack.py up [--with-services] # start in the background, wait until ready
    python3 deploy/local/stack.py status
    python3 deploy/local/stack.py down                 # SIGTERM by PID/process group, then SIGKILL
    python3 deploy/local/stack.py run [--with-services]  # foreground; Ctrl-C stops all of it

Downloads and builds live in ``$SESSION_CORE_CACHE`` (default ``~/.cache/session-core``); data,
logs and PID files in the state directory (``--state-dir``, default
``~/.cache/session-core/state/default``). If ``KAFKA_BOOTSTRAP_SERVERS`` / ``MONGODB_URI`` are
set, that part of the infrastructure is taken as given and not started. See docs/local-stack.md.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KAFKA_POM = HERE / "kafka" / "pom.xml"
FERRET_SRC = HERE / "ferretdb"
HARNESS_PKG = HERE / "harnesses" / "package.json"

SERVICES = ("admission", "storage", "dispatcher", "receipts")
EXTRA_ENV = "SESSION_CORE_EXTRA_SERVICES"  # "name=command;name2=command2"


def cache_dir() -> Path:
    return Path(os.environ.get("SESSION_CORE_CACHE", "~/.cache/session-core")).expanduser()


def log(msg: str) -> None:
    _write(f"[stack] {msg}\n")


def _write(text: str) -> None:
    """stdout may be gone (a closed pipe, e.g. `make run | tee` after Ctrl-C): never let that
    stop the clean-up."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


class StackError(RuntimeError):
    pass


# ------------------------------------------------------------------------------------------
# versions (single source of truth: the build files)
# ------------------------------------------------------------------------------------------


def kafka_version() -> str:
    m = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", KAFKA_POM.read_text())
    if not m:
        raise StackError(f"no <kafka.version> in {KAFKA_POM}")
    return m.group(1).strip()


def ferretdb_version() -> str:
    gomod = (FERRET_SRC / "go.mod").read_text()
    m = re.search(r"github\.com/FerretDB/FerretDB\s+(v[0-9.]+)", gomod)
    if not m:
        raise StackError("no FerretDB requirement in deploy/local/ferretdb/go.mod")
    return m.group(1)


def _digest(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def kafka_home() -> Path:
    return cache_dir() / f"kafka-{kafka_version()}"


def ferretdb_binary() -> Path:
    return cache_dir() / "bin" / f"ferretdb-{ferretdb_version()}"


# ------------------------------------------------------------------------------------------
# install
# ------------------------------------------------------------------------------------------


def _run_logged(cmd: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
                what: str) -> None:
    log(f"{what}: {shlex.join(cmd)}")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout[-8000:])
        raise StackError(f"{what} failed (exit {proc.returncode})")
    log(f"{what}: done in {time.monotonic() - t0:.1f}s")


def _need_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if not path:
        raise StackError(f"'{name}' not found on PATH: {hint}")
    return path


def java_bin() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return _need_tool("java", "Kafka 4 needs Java 17+")


def install_kafka() -> Path:
    home = kafka_home()
    libs = home / "libs"
    marker = home / ".installed"
    want = _digest([KAFKA_POM])
    cached = marker.exists() and marker.read_text().strip() == want
    if cached and any(libs.glob("kafka_2.13-*.jar")):
        log(f"kafka {kafka_version()}: cached at {libs}")
        return libs
    mvn = _need_tool("mvn", "install Maven (apt-get install maven)")
    java_bin()
    tmp = home / "libs.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    _run_logged([mvn, "-B", "-q", "-f", str(KAFKA_POM), "dependency:copy-dependencies",
                 "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"],
                what=f"kafka {kafka_version()}: fetching jars from Maven Central")
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    marker.write_text(want + "\n")
    log(f"kafka {kafka_version()}: {len(list(libs.glob('*.jar')))} jars in {libs}")
    return libs


def install_ferretdb() -> Path:
    binary = ferretdb_binary()
    stamp = binary.with_name(binary.name + ".src")
    want = _digest([FERRET_SRC / "go.mod", FERRET_SRC / "go.sum", FERRET_SRC / "main.go"])
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == want:
        log(f"ferretdb {ferretdb_version()}: cached at {binary}")
        return binary
    go = _need_tool("go", "install Go 1.24+")
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    flags = env.get("GOFLAGS", "").split()
    flags = [f for f in flags if not f.startswith("-mod=")] + ["-mod=mod"]
    env["GOFLAGS"] = " ".join(flags)
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("CGO_ENABLED", "0")  # modernc.org/sqlite is pure Go
    tmp = binary.with_name(binary.name + ".tmp")
    _run_logged([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(tmp), "."],
                cwd=FERRET_SRC, env=env,
                what=f"ferretdb {ferretdb_version()}: building from the Go module proxy"
                     " (the first build takes minutes)")
    tmp.rename(binary)
    stamp.write_text(want + "\n")
    return binary


def harness_home() -> Path:
    """Where the pinned harness packages (deploy/local/harnesses/package.json) are installed."""
    return cache_dir() / f"harnesses-{_digest([HARNESS_PKG])}"


def harness_bin(name: str) -> Path:
    """``codex`` or ``claude`` from the cached install (``stack.py install`` puts them there)."""
    return harness_home() / "node_modules" / ".bin" / name


def install_harnesses() -> Path:
    """``npm install`` of the pinned Codex and Claude Code packages into the cache (each pulls its
    platform binary through an optional dependency); prints both versions."""
    home = harness_home()
    marker = home / ".installed"
    if not (marker.exists() and harness_bin("codex").exists() and harness_bin("claude").exists()):
        npm = _need_tool("npm", "install Node.js 20+ with npm")
        tmp = home.with_name(home.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shutil.copy(HARNESS_PKG, tmp / "package.json")
        env = dict(os.environ, DISABLE_AUTOUPDATER="1", npm_config_fund="false",
                   npm_config_audit="false", npm_config_update_notifier="false")
        _run_logged([npm, "install", "--no-save", "--include=optional"], cwd=tmp, env=env,
                    what="harnesses: npm install @openai/codex @anthropic-ai/claude-code")
        shutil.rmtree(home, ignore_errors=True)
        tmp.rename(home)
        marker.write_text("ok\n")
    for name in ("codex", "claude"):
        out = subprocess.run([str(harness_bin(name)), "--version"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=60, check=False)
        log(f"harness {name}: {(out.stdout or out.stderr).strip()} ({harness_bin(name)})")
    return home


def cmd_install(_: argparse.Namespace) -> int:
    t0 = time.monotonic()
    install_kafka()
    install_ferretdb()
    install_harnesses()
    log(f"install: everything in place ({time.monotonic() - t0:.1f}s)")
    return 0


# ------------------------------------------------------------------------------------------
# venv (outside the repo, keyed by pyproject.toml; .venv in the repo links to it)
# ------------------------------------------------------------------------------------------


def venv_path() -> Path:
    return cache_dir() / f"venv-{_digest([REPO / 'pyproject.toml'])[:12]}"


def cmd_venv(args: argparse.Namespace) -> int:
    venv = venv_path()
    py = venv / "bin" / "python"
    stamp = venv / ".session-core-installed"
    link = REPO / ".venv"
    repo = str(REPO)
    if not (py.exists() and stamp.exists()):
        shutil.rmtree(venv, ignore_errors=True)
        base = args.python or shutil.which("python3.11") or sys.executable
        t0 = time.monotonic()
        _run_logged([base, "-m", "venv", str(venv)], what=f"venv: creating {venv}")
        _run_logged([str(py), "-m", "pip", "install", "-q", "--upgrade", "pip"],
                    what="venv: upgrading pip")
        _run_logged([str(py), "-m", "pip", "install", "-q", "-e", ".[dev]"], cwd=REPO,
                    what="venv: pip install -e '.[dev]'")
        stamp.write_text(repo + "\n")
        log(f"venv: ready in {time.monotonic() - t0:.1f}s")
    elif stamp.read_text().strip() != repo:
        # same dependencies, another checkout (e.g. CI's clean clone): re-point the editable install
        _run_logged([str(py), "-m", "pip", "install", "-q", "--no-deps", "-e", "."], cwd=REPO,
                    what=f"venv: re-pointing the editable install at {repo}")
        stamp.write_text(repo + "\n")
    else:
        log(f"venv: cached at {venv}")
    if link.is_symlink() or not link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == venv:
            return 0
        if link.is_symlink():
            link.unlink()
        link.symlink_to(venv)
        log(f"venv: {link} -> {venv}")
    else:
        log(f"venv: {link} exists and is not a symlink; leaving it alone")
    return 0


# ------------------------------------------------------------------------------------------
# readiness probes (tiny wire-protocol clients, so no dependency is needed)
# ------------------------------------------------------------------------------------------


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        buf += chunk
    return bytes(buf)


def _kafka_request(sock: socket.socket, api_key: int, version: int, corr: int,
                   body: bytes) -> bytes:
    client = b"session-core-stack"
    header = struct.pack(">hhih", api_key, version, corr, len(client)) + client
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    resp = _recv_exact(sock, size)
    (got,) = struct.unpack(">i", resp[:4])
    if got != corr:
        raise ConnectionError(f"correlation id {got} != {corr}")
    return resp[4:]


@dataclass
class KafkaMetadata:
    brokers: list[tuple[int, str, int]]
    cluster_id: str | None
    controller_id: int


def kafka_metadata(host: str, port: int, timeout: float = 3.0) -> KafkaMetadata:
    """ApiVersions v0, then Metadata v4 (all topics) — proves the broker is up and registered."""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        r = _kafka_request(sock, 18, 0, 1, b"")  # ApiVersions v0
        (err,) = struct.unpack(">h", r[:2])
        if err:
            raise ConnectionError(f"ApiVersions error {err}")
        (n,) = struct.unpack(">i", r[2:6])
        ranges = {}
        for i in range(n):
            key, lo, hi = struct.unpack(">hhh", r[6 + 6 * i: 12 + 6 * i])
            ranges[key] = (lo, hi)
        lo, hi = ranges.get(3, (0, -1))
        if not lo <= 4 <= hi:
            raise ConnectionError(f"broker does not speak Metadata v4 (range {lo}..{hi})")
        # Metadata v4 request: topics = null (all), allow_auto_topic_creation = false
        r = _kafka_request(sock, 3, 4, 2, struct.pack(">ib", -1, 0))
    off = 4  # throttle_time_ms
    (nb,) = struct.unpack_from(">i", r, off)
    off += 4
    brokers = []

    def string(nullable: bool) -> str | None:
        nonlocal off
        (ln,) = struct.unpack_from(">h", r, off)
        off += 2
        if ln < 0:
            if not nullable:
                raise ConnectionError("null string in Metadata response")
            return None
        s = r[off: off + ln].decode()
        off += ln
        return s

    for _ in range(nb):
        (node,) = struct.unpack_from(">i", r, off)
        off += 4
        bhost = string(False) or ""
        (bport,) = struct.unpack_from(">i", r, off)
        off += 4
        string(True)  # rack
        brokers.append((node, bhost, bport))
    cluster_id = string(True)
    (controller,) = struct.unpack_from(">i", r, off)
    return KafkaMetadata(brokers, cluster_id, controller)


def _bson_doc(fields: dict[str, int | str]) -> bytes:
    out = bytearray()
    for k, v in fields.items():
        name = k.encode() + b"\0"
        if isinstance(v, int):
            out += b"\x10" + name + struct.pack("<i", v)
        else:
            sv = v.encode() + b"\0"
            out += b"\x02" + name + struct.pack("<i", len(sv)) + sv
    return struct.pack("<i", len(out) + 5) + bytes(out) + b"\0"


def _bson_top_number(doc: bytes, key: str) -> float | None:
    """Value of a top-level numeric field (double/int32/int64) in a BSON document."""
    off = 4
    end = len(doc) - 1
    fixed = {0x01: 8, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16,
             0x7F: 0, 0xFF: 0}
    while off < end:
        t = doc[off]
        off += 1
        nul = doc.index(b"\0", off)
        name = doc[off:nul].decode()
        off = nul + 1
        if name == key:
            if t == 0x01:
                return float(struct.unpack_from("<d", doc, off)[0])
            if t == 0x10:
                return float(struct.unpack_from("<i", doc, off)[0])
            if t == 0x12:
                return float(struct.unpack_from("<q", doc, off)[0])
            return None
        if t in fixed:
            off += fixed[t]
        elif t in (0x02, 0x0D, 0x0E):  # string, js code, symbol
            off += 4 + struct.unpack_from("<i", doc, off)[0]
        elif t in (0x03, 0x04):  # document, array
            off += struct.unpack_from("<i", doc, off)[0]
        elif t == 0x05:  # binary
            off += 5 + struct.unpack_from("<i", doc, off)[0]
        elif t == 0x0B:  # regex: two cstrings
            off = doc.index(b"\0", doc.index(b"\0", off) + 1) + 1
        else:
            raise ConnectionError(f"unexpected BSON type {t:#x}")
    return None


def mongo_ping(host: str, port: int, timeout: float = 3.0) -> bool:
    """One OP_MSG ``{ping: 1, $db: "admin"}``; true when the reply says ok: 1."""
    body = struct.pack("<I", 0) + b"\x00" + _bson_doc({"ping": 1, "$db": "admin"})
    msg = struct.pack("<iiii", 16 + len(body), 1, 0, 2013) + body
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(msg)
        (size,) = struct.unpack("<i", _recv_exact(sock, 4))
        resp = _recv_exact(sock, size - 4)
    _req, _to, opcode = struct.unpack_from("<iii", resp, 0)
    if opcode != 2013 or resp[16] != 0:
        raise ConnectionError(f"unexpected reply opcode {opcode}")
    ok = _bson_top_number(resp[17:], "ok")
    return ok == 1.0


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # loopback only
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a server could listen there (SO_REUSEADDR, as servers do: TIME_WAIT is fine)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def split_hostport(addr: str, default_port: int) -> tuple[str, int]:
    addr = addr.split(",")[0].strip()
    addr = re.sub(r"^[A-Za-z_]+://", "", addr)
    if ":" in addr:
        h, p = addr.rsplit(":", 1)
        return h or "127.0.0.1", int(p)
    return addr, default_port


# ------------------------------------------------------------------------------------------
# processes: pidfiles with start time (guards against PID reuse), one process group each
# ------------------------------------------------------------------------------------------


def _proc_start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = stat[stat.rindex(")") + 2:].split()
    if rest[0] == "Z":  # zombie: as good as gone
        return None
    return int(rest[19])


def _group_members(pgid: int) -> list[int]:
    members = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2:].split()
        if int(rest[2]) == pgid and rest[0] != "Z":
            members.append(int(d.name))
    return members


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


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}  # started by this launcher: reaped by it


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


def stop_process(state: State, proc: Proc, timeout: float) -> None:
    stop_many(state, [proc], timeout)


def _signal_group(proc: Proc, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pgid, sig)
    except ProcessLookupError:
        pass


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
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_group_members(p.pgid) for p in live):
        time.sleep(0.1)
    for proc in live:
        left = _group_members(proc.pgid)
        if left:
            log(f"{proc.name}: still running after {timeout:.0f}s ({left}); SIGKILL")
            _signal_group(proc, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_group_members(p.pgid) for p in live):
        time.sleep(0.05)
    for proc in live:
        if _group_members(proc.pgid):
            raise StackError(f"{proc.name}: process group {proc.pgid} survived SIGKILL")
        child = _CHILDREN.pop(proc.pid, None)
        if child is not None:
            child.wait(timeout=5)  # ours: reap it now
        else:
            # started by an earlier `up`, so init reaps it; wait briefly so `ps` shows no zombie
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline and Path(f"/proc/{proc.pid}").exists():
                time.sleep(0.05)
        (state.pids / f"{proc.name}.json").unlink(missing_ok=True)
        log(f"{proc.name}: stopped")


def stop_in_order(state: State, procs: Sequence[Proc], timeout: float,
                  first: signal.Signals = signal.SIGTERM) -> None:
    """Services (and extra commands) first, then the infrastructure."""
    infra = [p for p in procs if p.name in ("kafka", "ferretdb")]
    rest = [p for p in procs if p.name not in ("kafka", "ferretdb")]
    stop_many(state, rest, timeout, first)
    stop_many(state, infra, timeout, first)


# ------------------------------------------------------------------------------------------
# the components
# ------------------------------------------------------------------------------------------

KAFKA_PROPERTIES = """\
# written by deploy/local/stack.py on every start; edit the script, not this file
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
# a small single-node test box
num.network.threads=2
num.io.threads=4
background.threads=4
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=168
log.segment.bytes=67108864
"""

KAFKA_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafkaRequest.name = kafka.request.logger
logger.kafkaRequest.level = WARN
logger.stateChange.name = state.change.logger
logger.stateChange.level = WARN
logger.controller.name = kafka.controller
logger.controller.level = WARN
logger.logcleaner.name = kafka.log.LogCleaner
logger.logcleaner.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


@dataclass
class Options:
    state: State
    kafka_port: int
    controller_port: int | None
    mongo_port: int
    http_port: int
    venv: Path
    with_services: bool
    runtimes: bool
    demo: bool
    extra: list[tuple[str, str]]
    only: list[str]
    foreground: bool


def external_kafka() -> str | None:
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None


def external_mongo() -> str | None:
    return os.environ.get("MONGODB_URI") or None


def bootstrap(opts: Options) -> str:
    return external_kafka() or f"127.0.0.1:{opts.kafka_port}"


def mongodb_uri(opts: Options) -> str:
    return external_mongo() or f"mongodb://127.0.0.1:{opts.mongo_port}/"


def _kafka_ready(host: str, port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            md = kafka_metadata(host, port)
        except (OSError, struct.error, ValueError):
            return False
        return bool(md.brokers) and md.controller_id >= 0
    return check


def _mongo_ready(host: str, port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return mongo_ping(host, port)
        except (OSError, struct.error, ValueError):
            return False
    return check


def kafka_component(opts: Options) -> Component:
    libs = install_kafka()
    st = opts.state
    kdir = st.root / "kafka"
    data = kdir / "data"
    kdir.mkdir(parents=True, exist_ok=True)
    cport = opts.controller_port
    stored = st.data.get("kafka_controller_port")
    if cport is None:
        if isinstance(stored, int) and port_free(stored):
            cport = stored
        elif opts.kafka_port + 1 != opts.mongo_port and port_free(opts.kafka_port + 1):
            cport = opts.kafka_port + 1
        else:
            cport = free_port()
    if (data / "meta.properties").exists() and stored != cport:
        log(f"kafka: controller port changed ({stored} -> {cport}); wiping {data} and reformatting")
        shutil.rmtree(data)
    props = kdir / "server.properties"
    props.write_text(KAFKA_PROPERTIES.format(port=opts.kafka_port, cport=cport, data=data))
    log4j = kdir / "log4j2.properties"
    log4j.write_text(KAFKA_LOG4J2)
    java = java_bin()
    jvm = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
           "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}",
           f"-Dkafka.logs.dir={st.logs}", "-cp", f"{libs}/*"]
    if not (data / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        st.logs.mkdir(parents=True, exist_ok=True)
        fmt = [java, *jvm, "kafka.tools.StorageTool", "format", "--standalone",
               "-t", cluster_id, "-c", str(props)]
        what = "kafka: formatting KRaft storage (standalone controller)"
        try:
            _run_logged(fmt, what=what)
        except StackError as exc:
            # Seen once on a loaded 2-core machine (a chaos run started right after another
            # one's teardown); formatting an empty data directory again is harmless.
            log(f"{exc}; wiping {data} and trying once more")
            shutil.rmtree(data, ignore_errors=True)
            time.sleep(2)
            _run_logged(fmt, what=what)
        st.data["kafka_cluster_id"] = cluster_id
    st.data["kafka_controller_port"] = cport
    st.save()
    return Component(
        name="kafka", kind="infra",
        cmd=[java, *jvm, "kafka.Kafka", str(props)], env={},
        ready=_kafka_ready("127.0.0.1", opts.kafka_port), ready_timeout=120,
        describe=f"Kafka {kafka_version()} (KRaft) on 127.0.0.1:{opts.kafka_port}"
                 f" (controller {cport})",
    )


def ferretdb_component(opts: Options) -> Component:
    binary = install_ferretdb()
    data = opts.state.root / "ferretdb" / "data"
    data.mkdir(parents=True, exist_ok=True)
    return Component(
        name="ferretdb", kind="infra",
        cmd=[str(binary), "-listen", f"127.0.0.1:{opts.mongo_port}", "-sqlite-dir", str(data),
             "-log-level", "warn"],
        env={}, ready=_mongo_ready("127.0.0.1", opts.mongo_port), ready_timeout=60,
        describe=f"FerretDB {ferretdb_version()} (SQLite) on 127.0.0.1:{opts.mongo_port}",
    )


def auth_off() -> bool:
    return os.environ.get("SESSION_CORE_AUTH_DISABLED", "true").lower() in ("1", "true", "yes")


def local_api_key(opts: Options) -> str | None:
    """With auth on and no SESSION_CORE_API_KEYS of yours, the stack makes one local key for
    tenant "default" (kept in <state-dir>/api-key, mode 0600) and gives the services only its
    hashed entry (docs/security.md). None when auth is off or you set the keys yourself."""
    if auth_off() or os.environ.get("SESSION_CORE_API_KEYS"):
        return None
    f = opts.state.root / "api-key"
    if not f.exists():
        opts.state.root.mkdir(parents=True, exist_ok=True)
        f.write_text("sck_local_" + uuid.uuid4().hex + "\n")
        f.chmod(0o600)
    return f.read_text().strip()


def service_env(opts: Options) -> dict[str, str]:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap(opts),
        "MONGODB_URI": mongodb_uri(opts),
        "SESSION_CORE_HTTP_PORT": str(opts.http_port),
        "SESSION_CORE_HTTP_HOST": os.environ.get("SESSION_CORE_HTTP_HOST", "127.0.0.1"),
        "SESSION_CORE_AUTH_DISABLED": "true" if auth_off() else "false",
        "PYTHONUNBUFFERED": "1",
    }
    key = local_api_key(opts) if opts.with_services else None
    if key is not None:
        # the same entry format as `session-core hash-key default <key>`
        env["SESSION_CORE_API_KEYS"] = "default:" + hashlib.sha256(key.encode()).hexdigest()
        env["SESSION_CORE_API_KEY"] = key  # for the demo and the CLI this stack starts
    if opts.foreground:
        env.setdefault("SESSION_CORE_LOG_FORMAT", os.environ.get("SESSION_CORE_LOG_FORMAT",
                                                                 "console"))
    return env


def service_components(opts: Options) -> list[Component]:
    out: list[Component] = []
    env = service_env(opts)
    if opts.with_services:
        exe = opts.venv / "bin" / "session-core"
        if not exe.exists():
            raise StackError(f"{exe} not found: run `make venv` (and check that services/cli.py "
                             "exists)")
        for name in SERVICES:
            if name == "admission":
                url = f"http://127.0.0.1:{opts.http_port}"
                out.append(Component(name, [str(exe), name], env,
                                     ready_check("admission", opts), 90, "service", REPO, url,
                                     f"admission HTTP API on {url}"))
            else:
                # each non-HTTP service gets its health server on a free port (/readyz)
                hp = free_port()
                url = f"http://127.0.0.1:{hp}"
                out.append(Component(name, [str(exe), name],
                                     {**env, "SESSION_CORE_HEALTH_PORT": str(hp)},
                                     _http_ready(url), 90, "service", REPO, url,
                                     f"session-core {name} (health {url}/readyz)"))
        if opts.runtimes:
            out += runtime_components(opts, exe, env)
    for name, command in opts.extra:
        out.append(Component(name, ["/bin/sh", "-c", command], env, lambda: True, 30,
                             "service", REPO, "", command, min_alive=2.0))
    return out


RUNTIME_HARNESSES = ("claude_code", "codex", "minimax_code")
# the real harness binaries (docs/harnesses.md): harness → cached executable name
REAL_HARNESSES = {"codex": "codex", "claude_code": "claude"}


def harness_versions() -> None:
    """Print ``codex --version`` / ``claude --version`` (make run shows what it runs)."""
    for name in REAL_HARNESSES.values():
        exe = harness_bin(name)
        if not exe.exists():
            log(f"harness {name}: not installed ({exe}); run `python3 deploy/local/stack.py "
                "install`")
            continue
        out = subprocess.run([str(exe), "--version"], stdin=subprocess.DEVNULL,
                             capture_output=True, text=True, timeout=60, check=False)
        log(f"harness {name} --version: {(out.stdout or out.stderr).strip()}")


def runtime_components(opts: Options, exe: Path, env: dict[str, str]) -> list[Component]:
    """The scripted model server (a process), a real Runtime per real harness (``--engine
    real``, placements none and openai_hosted) and a simulated reference Runtime per harness
    (placement self_hosted, where the fault switches work; MiniMax Code — no real harness —
    everywhere)."""
    out: list[Component] = []
    model_port = free_port()
    model_url = f"http://127.0.0.1:{model_port}"
    # the demo (run_demo copies this process's environment) scripts the model through it
    os.environ["SESSION_CORE_MODEL_SERVER"] = model_url
    env["SESSION_CORE_MODEL_SERVER"] = model_url
    py = opts.venv / "bin" / "python"
    out.append(Component("modelserver", [str(py), "-m", "services.modelserver", "--port",
                                         str(model_port)], env,
                         lambda: http_ok(model_url + "/_requests"), 30, "service", REPO, model_url,
                         f"scripted model server {model_url} (Responses + Messages API)"))
    harness_versions()
    for harness, binary in REAL_HARNESSES.items():
        if not harness_bin(binary).exists():
            continue
        base = model_url + ("/v1" if harness == "codex" else "")
        cmd = [str(exe), "runtime", "--harness", harness, "--engine", "real",
               "--model-base-url", base, "--placements", "none,openai_hosted"]
        out.append(Component(f"runtime-{harness}-real", cmd, env, lambda: True, 30, "service",
                             REPO, "", f"real Runtime ({harness}: {harness_bin(binary)})",
                             min_alive=2.0))
    for harness in RUNTIME_HARNESSES:
        placements = ("none,openai_hosted,self_hosted" if harness not in REAL_HARNESSES
                      or not harness_bin(REAL_HARNESSES[harness]).exists() else "self_hosted")
        cmd = [str(exe), "runtime", "--harness", harness, "--placements", placements]
        out.append(Component(f"runtime-{harness}", cmd, env, lambda: True, 30, "service", REPO,
                             "", f"reference Runtime ({harness}, simulated: {placements})",
                             min_alive=2.0))
    return out


def run_demo(opts: Options) -> None:
    """``session-core demo`` against the running system (make run's scripted tour)."""
    env = {**os.environ, **service_env(opts),
           "SESSION_CORE_API": f"http://127.0.0.1:{opts.http_port}"}
    log("running the demo (session-core demo) — service logs follow it")
    rc = subprocess.call([str(opts.venv / "bin" / "session-core"), "demo"], env=env,
                         cwd=REPO, stdin=subprocess.DEVNULL)
    if rc != 0:
        log(f"the demo ended with exit code {rc}; the system keeps running")


def parse_extra(values: Sequence[str]) -> list[tuple[str, str]]:
    items: list[str] = []
    if os.environ.get(EXTRA_ENV):
        items += [x for x in os.environ[EXTRA_ENV].split(";") if x.strip()]
    items += list(values)
    out = []
    for item in items:
        name, sep, command = item.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not command.strip():
            raise StackError(f"bad extra service {item!r}: expected NAME=COMMAND")
        out.append((name, command.strip()))
    return out


def infra_plan(opts: Options) -> list[tuple[str, Callable[[], Component]]]:
    """Infrastructure factories in start order (stop order is the reverse)."""
    plan: list[tuple[str, Callable[[], Component]]] = []
    if not external_kafka():
        plan.append(("kafka", lambda: kafka_component(opts)))
    if not external_mongo():
        plan.append(("ferretdb", lambda: ferretdb_component(opts)))
    return plan


def _http_ready(url: str) -> Callable[[], bool]:
    return lambda: http_ok(url + "/readyz")


def ready_check(name: str, opts: Options, proc: Proc | None = None) -> Callable[[], bool]:
    if proc is not None and proc.url:
        return _http_ready(proc.url)
    if name == "kafka":
        return _kafka_ready("127.0.0.1", opts.kafka_port)
    if name == "ferretdb":
        return _mongo_ready("127.0.0.1", opts.mongo_port)
    if name == "admission":
        return lambda: http_ok(f"http://127.0.0.1:{opts.http_port}/readyz")
    return lambda: True


def _const(comp: Component) -> Callable[[], Component]:
    return lambda: comp


def _wait_ready(comp: Component, proc: Proc, t_start: float) -> None:
    t0 = time.monotonic()
    deadline = t0 + comp.ready_timeout
    while time.monotonic() < deadline:
        if not proc.alive():
            tail = Path(proc.log).read_text(errors="replace").splitlines()[-30:]
            sys.stdout.write("\n".join(f"  {comp.name}| {line}" for line in tail) + "\n")
            raise StackError(f"{comp.name} exited during start-up; log: {proc.log}")
        if time.monotonic() - t0 >= comp.min_alive and comp.ready():
            log(f"{comp.name}: ready at +{time.monotonic() - t_start:.1f}s — {comp.describe}")
            return
        time.sleep(0.25)
    raise StackError(f"{comp.name} not ready after {comp.ready_timeout:.0f}s; log: {proc.log}")


def _check_port(name: str, port: int) -> None:
    if not port_free(port):
        raise StackError(f"{name}: port {port} on 127.0.0.1 is taken by a process this state dir "
                         "did not start; stop it or pick another port")


def start_all(opts: Options) -> list[Proc]:
    """Start what is not running yet, in two phases (infrastructure, then services); within a
    phase everything starts at once and then each is waited for. Returns all our processes."""
    st = opts.state.load()
    infra = infra_plan(opts)
    services: list[tuple[str, Callable[[], Component]]] = []
    if opts.with_services or opts.extra:
        services = [(c.name, _const(c)) for c in service_components(opts)]
    ports = {"kafka": opts.kafka_port, "ferretdb": opts.mongo_port}
    if opts.with_services:
        ports["admission"] = opts.http_port
    procs: list[Proc] = []
    new: list[Proc] = []
    for name, _ in infra + services:  # refuse before starting anything
        running = st.proc(name)
        if (not opts.only or name in opts.only) and name in ports and not (
                running and running.alive()):
            _check_port(name, ports[name])
    t0 = time.monotonic()
    try:
        for phase in (infra, services):
            waiting: list[tuple[Component, Proc]] = []
            for name, factory in phase:
                if opts.only and name not in opts.only:
                    continue
                running = st.proc(name)
                if running and running.alive():
                    ready = ready_check(name, opts, running)()
                    log(f"{name}: already running (pid {running.pid})"
                        f"{'' if ready else ', NOT ready'}")
                    procs.append(running)
                    continue
                if running:
                    stop_process(st, running, 5)  # stale group members, if any
                comp = factory()
                proc = start_process(st, comp)
                log(f"{name}: started pid {proc.pid}, log {proc.log}")
                procs.append(proc)
                new.append(proc)
                waiting.append((comp, proc))
            for comp, proc in waiting:
                _wait_ready(comp, proc, t0)
    except BaseException:
        log("start-up failed; stopping what this command started")
        stop_in_order(st, new, 20)
        raise
    log(f"stack ready in {time.monotonic() - t0:.1f}s")
    return procs


def print_banner(opts: Options) -> None:
    print()
    print(f"  Kafka bootstrap : {bootstrap(opts)}" + ("  (external)" if external_kafka() else ""))
    print(f"  MongoDB URI     : {mongodb_uri(opts)}" + ("  (external)" if external_mongo() else ""))
    print(f"  state dir       : {opts.state.root}  (logs in {opts.state.logs})")
    if opts.with_services:
        url = f"http://127.0.0.1:{opts.http_port}"
        print(f"  API             : {url}   (readiness: curl -fsS {url}/readyz)")
        key = local_api_key(opts)
        if auth_off():
            print("  auth            : OFF (SESSION_CORE_AUTH_DISABLED=true, local use only) —"
                  " no Authorization header needed, e.g.")
            print(f"                    curl -fsS {url}/healthz")
        elif key is not None:
            print(f"  auth            : ON — local key of tenant 'default' (in "
                  f"{opts.state.root / 'api-key'}):")
            print(f"                    export SESSION_CORE_API_KEY={key}")
            print(f"                    curl -fsS -H \"Authorization: Bearer {key}\" "
                  f"{url}/v1/sessions/<session_id>")
        else:
            print("  auth            : ON — send 'Authorization: Bearer <key>' with a key whose"
                  " entry is in your SESSION_CORE_API_KEYS")
            print("                    (tenant:sha256hex entries; make one with"
                  " `session-core hash-key <tenant>`)")
    print(f"  environment     : export KAFKA_BOOTSTRAP_SERVERS={bootstrap(opts)}"
          f" MONGODB_URI={mongodb_uri(opts)}")
    print()


# ------------------------------------------------------------------------------------------
# commands
# ------------------------------------------------------------------------------------------


def make_options(args: argparse.Namespace, foreground: bool = False) -> Options:
    return Options(
        state=State(Path(args.state_dir).expanduser().resolve()),
        kafka_port=args.kafka_port,
        controller_port=args.kafka_controller_port,
        mongo_port=args.mongo_port,
        http_port=args.http_port,
        venv=Path(args.venv).expanduser(),
        with_services=bool(getattr(args, "with_services", False)),
        runtimes=bool(getattr(args, "runtimes", False)),
        demo=bool(getattr(args, "demo", False)),
        extra=parse_extra(getattr(args, "extra", None) or []),
        only=list(getattr(args, "only", None) or []),
        foreground=foreground,
    )


def cmd_up(args: argparse.Namespace) -> int:
    opts = make_options(args)
    if external_kafka() and external_mongo() and not (opts.with_services or opts.extra):
        log("KAFKA_BOOTSTRAP_SERVERS and MONGODB_URI are set: starting no infrastructure")
    start_all(opts)
    print_banner(opts)
    log(f"stop with: python3 deploy/local/stack.py down --state-dir {opts.state.root}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    st = State(Path(args.state_dir).expanduser().resolve())
    procs = st.procs()
    if args.only:
        procs = [p for p in procs if p.name in args.only]
    if not procs:
        log(f"nothing running for {st.root}")
        return 0
    stop_in_order(st, procs, args.timeout, signal.SIGKILL if args.kill else signal.SIGTERM)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    opts = make_options(args)
    st = opts.state.load()
    procs = st.procs()
    if not procs:
        log(f"nothing started from {st.root}")
    rc = 0
    for p in procs:
        alive = p.alive()
        ready = alive and ready_check(p.name, opts, p)()
        if not ready:
            rc = 1
        print(f"  {p.name:<12} pid {p.pid:<8} {'running' if alive else 'DEAD':<8}"
              f" {'ready' if ready else 'not ready':<10} log {p.log}")
    return rc if procs else 3


def _follow(procs: Sequence[Proc], stop: threading.Event) -> None:
    """Interleave the services' logs on the terminal, each line prefixed with the name."""
    handles = {}
    for p in procs:
        f = open(p.log, errors="replace")  # closed below
        f.seek(p.log_offset)
        handles[p.name] = f
    width = max((len(n) for n in handles), default=5)
    try:
        while not stop.is_set():
            idle = True
            for name, f in handles.items():
                for line in iter(f.readline, ""):
                    idle = False
                    _write(f"{name:>{width}} | {line.rstrip(chr(10))}\n")
            if idle:
                stop.wait(0.2)
    finally:
        for f in handles.values():
            f.close()


def cmd_run(args: argparse.Namespace) -> int:
    opts = make_options(args, foreground=True)
    st = opts.state
    stop = threading.Event()

    def on_term(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    procs: list[Proc] = []
    follower = None
    return_code = 0
    try:
        procs = start_all(opts)
        print_banner(opts)
        if opts.demo and opts.with_services:
            run_demo(opts)
        svc = [p for p in procs if p.name not in ("kafka", "ferretdb")]
        if svc:
            follower = threading.Thread(target=_follow, args=(svc, stop), daemon=True)
            follower.start()
        infra = [p.log for p in procs if p.name in ("kafka", "ferretdb")]
        if infra:
            log("infrastructure logs: " + ", ".join(infra))
        log("running in the foreground; Ctrl-C stops everything")
        reported: set[str] = set()
        while True:
            for p in procs:
                if p.name not in reported and not p.alive():
                    reported.add(p.name)
                    log(f"{p.name} (pid {p.pid}) exited; see {p.log}")
                    if p.name in ("kafka", "ferretdb"):
                        raise StackError(f"{p.name} died; stopping")
            time.sleep(0.5)
    except KeyboardInterrupt:
        _write("\n")
        log("stopping")
    except StackError as e:
        log(str(e))
        return_code = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not abort the clean-up
        stop.set()
        if follower:
            follower.join(timeout=2)
        mine = {q.name for q in procs}
        stop_in_order(st, [p for p in st.procs() if p.name in mine], 20)
    return return_code


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="stack.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--state-dir", default=str(cache_dir() / "state" / "default"),
                       help="data, logs and PID files (default: %(default)s)")
        p.add_argument("--kafka-port", type=int, default=9092)
        p.add_argument("--kafka-controller-port", type=int, default=None,
                       help="KRaft controller listener (default: remembered, else kafka-port+1,"
                            " else any free port)")
        p.add_argument("--mongo-port", type=int, default=27017)
        p.add_argument("--http-port", type=int,
                       default=int(os.environ.get("SESSION_CORE_HTTP_PORT", "8080")),
                       help="admission HTTP port (default: $SESSION_CORE_HTTP_PORT or 8080)")
        p.add_argument("--venv", default=str(REPO / ".venv"),
                       help="venv holding the session-core command (default: %(default)s)")

    def starting(p: argparse.ArgumentParser) -> None:
        common(p)
        p.add_argument("--with-services", action="store_true",
                       help="also start session-core admission|storage|dispatcher|receipts")
        p.add_argument("--runtimes", action="store_true",
                       help="with --with-services: also one reference Runtime per harness")
        p.add_argument("--extra", action="append", metavar="NAME=COMMAND",
                       help=f"also start this command (repeatable; or ${EXTRA_ENV}="
                            "'name=cmd;name2=cmd2')")
        p.add_argument("--only", action="append", metavar="NAME",
                       help="start only this component (kafka, ferretdb, a service); repeatable")

    p = sub.add_parser("install", help="fetch Kafka jars and build FerretDB (cached, idempotent)")
    p.set_defaults(func=cmd_install)
    p = sub.add_parser("venv", help="create/reuse the venv outside the repo and link .venv to it")
    p.add_argument("--python", default=None, help="base interpreter (default: python3.11)")
    p.set_defaults(func=cmd_venv)
    p = sub.add_parser("up", help="start in the background and wait until ready")
    starting(p)
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("run", help="start in the foreground; Ctrl-C stops everything")
    starting(p)
    p.add_argument("--demo", action="store_true",
                   help="once ready, play the scripted demo (session-core demo)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("down", help="stop everything started from this state dir")
    common(p)
    p.add_argument("--only", action="append", metavar="NAME", help="stop only this component")
    p.add_argument("--kill", action="store_true",
                   help="SIGKILL at once, no graceful stop (crash tests: kill -9)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds between SIGTERM and SIGKILL")
    p.set_defaults(func=cmd_down)
    p = sub.add_parser("status", help="what runs from this state dir, and whether it is ready")
    common(p)
    p.set_defaults(func=cmd_status)
    p = sub.add_parser("env", help="print the environment that points at this stack")
    common(p)
    p.set_defaults(func=cmd_env)
    return ap


def cmd_env(args: argparse.Namespace) -> int:
    opts = make_options(args)
    print(f"export KAFKA_BOOTSTRAP_SERVERS={bootstrap(opts)}")
    print(f"export MONGODB_URI={mongodb_uri(opts)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc: int = args.func(args)
    except StackError as e:
        log(f"error: {e}")
        return 1
    return rc


if __name__ == "__main__":
    sys.exit(main())

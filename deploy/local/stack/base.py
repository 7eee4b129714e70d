"""What every part of the launcher shares: where things are, versions, the ``[stack]`` log
line, local ports. Standard library only: ``install`` and ``venv`` run before the venv exists."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import socket
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

LOCAL = Path(__file__).resolve().parent.parent  # deploy/local
REPO = LOCAL.parent.parent
KAFKA_POM = LOCAL / "kafka" / "pom.xml"
FERRET_SRC = LOCAL / "ferretdb"
# files that replace upstream FerretDB's at build time (over a copy of its module, built with a
# ``replace``: install.ferretdb_patched), by their path in the FerretDB module;
# ``UPSTREAM.sha256`` pins the upstream file each one replaces
FERRET_OVERLAY = FERRET_SRC / "_overlay"
HARNESS_PKG = LOCAL / "harnesses" / "package.json"
INFRA = ("kafka", "postgres", "ferretdb")


class StackError(RuntimeError):
    pass


def kafka_cluster_id() -> str:
    """A fresh KRaft cluster id: 16 random bytes, url-safe base64 as Kafka's own. Kafka's format
    tool reads an id that starts with "-" as an option and fails (1 id in 64), so "-" is never
    first, as Kafka's ``Uuid.randomUuid`` ensures too."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def cache_dir() -> Path:
    return Path(os.environ.get("SESSION_CORE_CACHE", "~/.cache/session-core")).expanduser()


_sinks: list[Callable[[str], None]] = []


def write(text: str) -> None:
    """To the innermost ``log_to`` sink, else stdout. stdout may be gone (a closed pipe, e.g.
    `make run | tee` after Ctrl-C): never let that stop the clean-up."""
    if _sinks:
        _sinks[-1](text)
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def log(msg: str) -> None:
    write(f"[stack] {msg}\n")


@contextlib.contextmanager
def log_to(sink: Callable[[str], None]) -> Iterator[None]:
    """Send the launcher's output to ``sink`` instead of stdout while the block runs (the Python
    API keeps it for the message of a failed start)."""
    _sinks.append(sink)
    try:
        yield
    finally:
        _sinks.remove(sink)


# --- versions (single source of truth: the build files) and cache paths ----------------------


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


def digest(paths: Sequence[Path]) -> str:
    """Cache key of build inputs: file names and contents (not their directory), so a checkout
    anywhere finds the same cache entries."""
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def kafka_home() -> Path:
    return cache_dir() / f"kafka-{kafka_version()}"


def ferretdb_sources() -> list[Path]:
    # what the binary is built from (its tests are not: changing them rebuilds nothing)
    return [FERRET_SRC / "go.mod", FERRET_SRC / "go.sum",
            *sorted(p for p in FERRET_SRC.glob("*.go") if not p.name.endswith("_test.go")),
            *sorted(p for p in FERRET_OVERLAY.rglob("*") if p.is_file())]


def ferretdb_binary() -> Path:
    # the source digest is in the name: worktrees with different wrapper sources (main.go,
    # idindex.go) each keep their own binary instead of rebuilding over each other's
    return cache_dir() / "bin" / f"ferretdb-{ferretdb_version()}-{digest(ferretdb_sources())[:8]}"


def harness_home() -> Path:
    """Where the pinned harness packages (deploy/local/harnesses/package.json) are installed."""
    return cache_dir() / f"harnesses-{digest([HARNESS_PKG])}"


def harness_bin(name: str) -> Path:
    """``codex`` or ``claude`` from the cached install (``install`` puts them there)."""
    return harness_home() / "node_modules" / ".bin" / name


DEV_LOCK = REPO / "requirements" / "dev.lock"


def venv_path() -> Path:
    """Keyed by the dev/test lock, what is installed: a changed lock is a new venv, never an old
    one patched up. (The editable install of the project itself follows pyproject.toml and the
    checkout: ``install_venv`` redoes it when either changes.)"""
    return cache_dir() / f"venv-{digest([DEV_LOCK])[:12]}"


# --- local ports and HTTP ---------------------------------------------------------------------


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
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports the OS has just handed out. Each socket stays bound until all are
    picked: a port closed before the next is asked for can be handed out again (a clean CI run
    once gave Kafka and FerretDB the same port)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(n):
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind(("127.0.0.1", 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # loopback only
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False

"""Downloads and builds into the cache (``$SESSION_CORE_CACHE``, default ``~/.cache/session-core``):
the Kafka jars (Maven), the FerretDB binary (Go), the pinned harnesses (npm) and the project's
venv. Each is keyed by a hash of its build file, so a rerun is a no-op. Standard library only."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from .base import (
    DEV_LOCK,
    FERRET_OVERLAY,
    FERRET_SRC,
    HARNESS_PKG,
    KAFKA_POM,
    REPO,
    StackError,
    digest,
    ferretdb_binary,
    ferretdb_sources,
    ferretdb_version,
    harness_bin,
    harness_home,
    kafka_home,
    kafka_version,
    log,
    venv_path,
    write,
)


def run_logged(cmd: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
               what: str) -> None:
    log(f"{what}: {shlex.join(cmd)}")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        write(proc.stdout[-8000:])
        raise StackError(f"{what} failed (exit {proc.returncode})")
    log(f"{what}: done in {time.monotonic() - t0:.1f}s")


def need_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if not path:
        raise StackError(f"'{name}' not found on PATH: {hint}")
    return path


def java_bin() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return need_tool("java", "Kafka 4 needs Java 17+")


def install_kafka() -> Path:
    home = kafka_home()
    libs = home / "libs"
    marker = home / ".installed"
    want = digest([KAFKA_POM])
    cached = marker.exists() and marker.read_text().strip() == want
    if cached and any(libs.glob("kafka_2.13-*.jar")):
        log(f"kafka {kafka_version()}: cached at {libs}")
        return libs
    mvn = need_tool("mvn", "install Maven (apt-get install maven)")
    java_bin()
    tmp = home / "libs.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    run_logged([mvn, "-B", "-q", "-f", str(KAFKA_POM), "dependency:copy-dependencies",
                "-DincludeScope=runtime", f"-DoutputDirectory={tmp}"],
               what=f"kafka {kafka_version()}: fetching jars from Maven Central")
    shutil.rmtree(libs, ignore_errors=True)
    tmp.rename(libs)
    marker.write_text(want + "\n")
    log(f"kafka {kafka_version()}: {len(list(libs.glob('*.jar')))} jars in {libs}")
    return libs


def go_env() -> dict[str, str]:
    """The environment the store's wrapper is built in: modules resolved from go.mod and go.sum
    (``-mod=mod``), the machine's Go, no cgo (modernc.org/sqlite is pure Go)."""
    env = dict(os.environ)
    flags = env.get("GOFLAGS", "").split()
    flags = [f for f in flags if not f.startswith("-mod=")] + ["-mod=mod"]
    env["GOFLAGS"] = " ".join(flags)
    env.setdefault("GOTOOLCHAIN", "local")
    env.setdefault("CGO_ENABLED", "0")
    return env


def install_ferretdb() -> Path:
    binary = ferretdb_binary()
    stamp = binary.with_name(binary.name + ".src")
    want = digest(ferretdb_sources())
    if binary.exists() and stamp.exists() and stamp.read_text().strip() == want:
        log(f"ferretdb {ferretdb_version()}: cached at {binary}")
        return binary
    go = need_tool("go", "install Go 1.24+")
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = go_env()
    tmp = binary.with_name(binary.name + ".tmp")
    modfile = ferretdb_patched(go, env, binary)
    run_logged([go, "build", "-trimpath", "-ldflags=-s -w", f"-modfile={modfile}", "-o",
                str(tmp), "."],
               cwd=FERRET_SRC, env=env,
               what=f"ferretdb {ferretdb_version()}: building from the Go module proxy"
                    " (the first build takes minutes)")
    tmp.rename(binary)
    stamp.write_text(want + "\n")
    return binary


def ferretdb_patched(go: str, env: dict[str, str], binary: Path) -> Path:
    """The ``-modfile`` of the build: the wrapper's ``go.mod`` plus a ``replace`` of FerretDB by
    a copy of its module in which each file under ``deploy/local/ferretdb/_overlay`` replaces the
    file at the same path (docs/local-stack.md, "The FerretDB wrapper"; Go refuses ``-overlay``
    for files in the module cache). A file whose upstream content is not the one
    ``UPSTREAM.sha256`` pins stops the build: a version bump needs its patches re-derived."""
    got = subprocess.run([go, "mod", "download", "-json", "github.com/FerretDB/FerretDB"],
                         cwd=FERRET_SRC, env=env, capture_output=True, text=True, check=False)
    if got.returncode != 0:
        raise StackError(f"go mod download of FerretDB failed: {(got.stdout + got.stderr)[-2000:]}")
    upstream = Path(json.loads(got.stdout)["Dir"])
    pins = {}
    for line in (FERRET_OVERLAY / "UPSTREAM.sha256").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            sha, rel = line.split()
            pins[rel] = sha
    patches = sorted(p for p in FERRET_OVERLAY.rglob("*.go") if p.is_file())
    for patched in patches:
        rel = patched.relative_to(FERRET_OVERLAY).as_posix()
        if rel not in pins:
            raise StackError(f"{patched}: no pinned upstream sha256 in UPSTREAM.sha256")
        original = upstream / rel
        if not original.is_file():
            raise StackError(f"{patched}: FerretDB {ferretdb_version()} has no {rel}")
        if hashlib.sha256(original.read_bytes()).hexdigest() != pins[rel]:
            raise StackError(f"{patched}: FerretDB {ferretdb_version()}'s {rel} is not the file "
                             "this patch was written against; re-derive the patch")
    module = binary.with_name(binary.name + ".module")
    if module.exists():
        _writable(module)
        shutil.rmtree(module)
    shutil.copytree(upstream, module)
    _writable(module)  # the module cache's directories and files are read-only, and so the copy
    for patched in patches:
        shutil.copyfile(patched, module / patched.relative_to(FERRET_OVERLAY))
    modfile = binary.with_name(binary.name + ".build.mod")
    modfile.write_text((FERRET_SRC / "go.mod").read_text()
                       + f"\nreplace github.com/FerretDB/FerretDB => {module}\n")
    shutil.copyfile(FERRET_SRC / "go.sum", modfile.with_suffix(".sum"))
    return modfile


def _writable(tree: Path) -> None:
    tree.chmod(0o755)
    for p in tree.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)


def harness_version(name: str) -> str:
    out = subprocess.run([str(harness_bin(name)), "--version"], stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, timeout=60, check=False)
    return (out.stdout or out.stderr).strip()


def install_harnesses() -> Path:
    """``npm install`` of the pinned Codex and Claude Code packages into the cache (each pulls its
    platform binary through an optional dependency); prints both versions."""
    home = harness_home()
    marker = home / ".installed"
    if not (marker.exists() and harness_bin("codex").exists() and harness_bin("claude").exists()):
        npm = need_tool("npm", "install Node.js 20+ with npm")
        tmp = home.with_name(home.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shutil.copy(HARNESS_PKG, tmp / "package.json")
        env = dict(os.environ, DISABLE_AUTOUPDATER="1", npm_config_fund="false",
                   npm_config_audit="false", npm_config_update_notifier="false")
        run_logged([npm, "install", "--no-save", "--include=optional"], cwd=tmp, env=env,
                   what="harnesses: npm install @openai/codex @anthropic-ai/claude-code")
        shutil.rmtree(home, ignore_errors=True)
        tmp.rename(home)
        marker.write_text("ok\n")
    for name in ("codex", "claude"):
        log(f"harness {name}: {harness_version(name)} ({harness_bin(name)})")
    return home


def install_all() -> None:
    t0 = time.monotonic()
    install_kafka()
    install_ferretdb()
    install_harnesses()
    log(f"install: everything in place ({time.monotonic() - t0:.1f}s)")


def install_venv(python: str | None = None, *, link: bool = True) -> Path:
    """The project's venv outside the repo, installed from ``requirements/dev.lock`` alone
    (``--require-hashes --no-deps``: nothing unlocked gets in) plus the project itself, editable
    and without build isolation (its build backend is locked too). Keyed by the lock
    (``venv_path``); the editable install is redone when the checkout or its pyproject.toml
    changes. ``.venv`` links to it unless ``link`` is false (``make fresh-check``)."""
    venv = venv_path()
    with _held(venv.with_name(venv.name + ".lock")):
        _make_venv(venv, python)
    if link:
        _link_venv(venv)
    return venv


@contextlib.contextmanager
def _held(lock: Path) -> Iterator[None]:
    """One builder of a venv at a time: two `make` targets started together (or two checkouts
    sharing the cache) would otherwise delete each other's half-made venv (ensurepip then fails)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _make_venv(venv: Path, python: str | None) -> None:
    py = venv / "bin" / "python"
    stamp = venv / ".session-core-installed"
    # what the editable install was made from: this checkout and its pyproject.toml (entry points)
    project = f"{REPO}\n{digest([REPO / 'pyproject.toml'])}"
    if not (py.exists() and stamp.exists()):
        shutil.rmtree(venv, ignore_errors=True)
        base = python or shutil.which("python3.11") or sys.executable
        t0 = time.monotonic()
        run_logged([base, "-m", "venv", str(venv)], what=f"venv: creating {venv}")
        run_logged([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--require-hashes", "--no-deps", "-r", str(DEV_LOCK)],
                   what=f"venv: pip install from {DEV_LOCK.relative_to(REPO)}")
        _install_project(py)
        stamp.write_text(project + "\n")
        log(f"venv: ready in {time.monotonic() - t0:.1f}s")
    elif stamp.read_text().strip() != project:
        # same lock, another checkout (e.g. CI's clean clone) or another pyproject.toml
        _install_project(py)
        stamp.write_text(project + "\n")
    else:
        log(f"venv: cached at {venv}")


def _install_project(py: Path) -> None:
    run_logged([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                "--no-build-isolation", "-e", "."], cwd=REPO,
               what=f"venv: editable install of {REPO}")


def _link_venv(venv: Path) -> None:
    link = REPO / ".venv"
    if link.is_symlink() or not link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == venv:
            return
        if link.is_symlink():
            link.unlink()
        link.symlink_to(venv)
        log(f"venv: {link} -> {venv}")
    else:
        log(f"venv: {link} exists and is not a symlink; leaving it alone")

"""The services and reference Runtimes as real processes (``python -m services.cli …``), each in
its own process group, so tests can stop them gracefully (SIGTERM), crash them (SIGKILL, a real
``kill -9``) and start them again with the same arguments. Used by the e2e and chaos suites."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from deploy.local.stack import free_port
from shared.domain.tenancy import key_entry
from shared.settings import Settings
from shared.store import own_databases, own_databases_env

TENANT = "e2e"  # the tenant of the API key launch() configures

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("storage", "dispatcher", "receipts", "admission")
# an admission replica that allows one concurrent wait (a real 429 past it)
ONE_WAIT = {"SESSION_CORE_MAX_CONCURRENT_WAITS": "1",
            "SESSION_CORE_MAX_CONCURRENT_WAITS_PER_TENANT": "1"}


class StopFailed(AssertionError):
    """Processes that did not stop cleanly: name → what happened (their logs are in the log
    directory)."""

    def __init__(self, failed: dict[str, str], log_dir: Path | None) -> None:
        self.failed = failed
        super().__init__("not stopped cleanly: " + "; ".join(
            f"{n}: {why}" for n, why in sorted(failed.items())) + f" (logs: {log_dir})")


@dataclass
class Core:
    base_url: str
    env: dict[str, str]
    settings: Settings
    runtime_ids: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    log_dir: Path | None = None
    args: dict[str, tuple[tuple[str, ...], dict[str, str] | None]] = field(default_factory=dict)
    metrics_urls: dict[str, str] = field(default_factory=dict)  # service → its /metrics
    api_key: str | None = None

    def client(self, timeout: float = 60) -> httpx.AsyncClient:
        """An HTTP client of the API, with the API key the services were launched with."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return httpx.AsyncClient(base_url=self.base_url, timeout=timeout, headers=headers)

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.Popen[bytes]:
        assert self.log_dir is not None
        log = open(self.log_dir / f"{name}.log", "ab")
        p = subprocess.Popen([sys.executable, "-m", "services.cli", *args], cwd=REPO,
                             env={**self.env, **(env or {})}, stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = p
        self.args[name] = (args, env)
        return p

    def kill(self, name: str) -> None:
        """``kill -9`` the process group of ``name`` and reap it: no shutdown code runs."""
        p = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)

    def respawn(self, name: str) -> subprocess.Popen[bytes]:
        """Start ``name`` again with the arguments it was first started with."""
        args, env = self.args[name]
        return self.spawn(name, *args, env=env)

    def dead(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is not None]

    def diagnosis(self, lines: int = 1500, last: int = 3) -> str:
        """What each service logged lately, compactly (for a failure message, which CI shows
        where it shows nothing else): per log, the warning and error events among its last
        ``lines`` lines, counted, and its last ``last`` lines that are not access logs."""
        assert self.log_dir is not None
        out = []
        for f in sorted(self.log_dir.glob("*.log")):
            tail = f.read_text(errors="replace").splitlines()[-lines:]
            counts: Counter[str] = Counter()
            for line in tail:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("level") in ("warning", "error", "critical"):
                    counts[f"{rec.get('level')} {str(rec.get('event'))[:90]}"] += 1
            recent = [ln[:300] for ln in tail if '"http.access"' not in ln][-last:]
            out.append(f"--- {f.name} ({len(tail)} lines read): "
                       + "; ".join(f"{n}× {e}" for e, n in counts.most_common(6))
                       + "".join(f"\n    {ln}" for ln in recent))
        return "\n".join(out)

    def logs_tail(self, chars: int = 3000) -> str:
        assert self.log_dir is not None
        return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-chars:]}"
                         for f in sorted(self.log_dir.glob("*.log")))

    def stop_all(self, grace: float = 15.0) -> None:
        """SIGTERM every process at once, then SIGKILL what is left after ``grace`` seconds.
        Raises (``StopFailed``, after every process is gone) when one did not stop cleanly: it
        had already died (not by ``kill``), exited non-zero on SIGTERM — its stop raised — or
        needed SIGKILL."""
        procs = dict(self.procs)
        failed = {n: f"had exited with {p.returncode} before the stop"
                  for n, p in procs.items() if p.poll() is not None and p.returncode != 0}
        running = {n: p for n, p in procs.items() if p.poll() is None}
        for p in running.values():
            with contextlib.suppress(ProcessLookupError):  # it may exit meanwhile
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for n, p in running.items():
            why = self._reap(p, max(0.1, deadline - time.monotonic()))
            if why:
                failed[n] = why
        self.procs.clear()
        if failed:
            raise StopFailed(failed, self.log_dir)

    def stop(self, name: str) -> None:
        """SIGTERM ``name`` and wait (SIGKILL after 15 s); raises ``StopFailed`` when it did not
        stop cleanly (see ``stop_all``)."""
        p = self.procs.pop(name, None)
        if name not in SERVICES:  # an extra replica is gone for good: no metrics to scrape
            self.metrics_urls.pop(name, None)
        if p is None:
            return
        if p.poll() is not None:
            if p.returncode != 0:
                raise StopFailed({name: f"had exited with {p.returncode} before the stop"},
                                 self.log_dir)
            return
        os.killpg(p.pid, signal.SIGTERM)
        why = self._reap(p, 15.0)
        if why:
            raise StopFailed({name: why}, self.log_dir)

    @staticmethod
    def _reap(p: subprocess.Popen[bytes], grace: float) -> str:
        """Wait for a process sent SIGTERM; what was wrong with its stop ("" if nothing)."""
        try:
            code = p.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
            return f"did not stop within {grace:.0f}s of SIGTERM (killed)"
        return "" if code == 0 else f"exited with {code} on SIGTERM"

    def admission_replica(self, name: str, env: dict[str, str]) -> str:
        """Another admission process, ``name``, on an HTTP port of its own with ``env``: its
        URL once it is ready (``stop(name)`` ends it)."""
        port, hp = free_port(), free_port()
        self.metrics_urls[name] = f"http://127.0.0.1:{hp}/metrics"  # its metrics port
        self.spawn(name, "admission", env={"SESSION_CORE_HTTP_PORT": str(port),
                                           "SESSION_CORE_HEALTH_PORT": str(hp), **env})
        url = f"http://127.0.0.1:{port}"
        self.wait_ready(url=url)
        return url

    def wait_ready(self, timeout: float = 90, url: str | None = None) -> None:
        """Until admission's (or ``url``'s) ``/readyz`` answers 200; raises with the logs if a
        process died."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if httpx.get(f"{url or self.base_url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            dead = self.dead()
            if dead or time.monotonic() > deadline:
                raise RuntimeError(f"core did not get ready (dead: {dead})\n{self.logs_tail()}")
            time.sleep(0.3)


def launch(stack: Any, log_dir: Path, runtimes: dict[str, list[str]], api_key: str,
           extra_env: dict[str, str] | None = None, prefix: str = "e") -> Core:
    """Create the topics, start the four services and one reference Runtime per entry of
    ``runtimes`` (name → CLI arguments) on ``stack`` with topics and a database of their own,
    and wait until admission is ready. The caller must ``stop_all()``."""
    tag = uuid.uuid4().hex[:8]
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap,
        "MONGODB_URI": stack.mongodb_uri,
        "SESSION_CORE_TOPIC_PREFIX": f"{prefix}{tag}.",
        "SESSION_CORE_MONGODB_DATABASE": f"{prefix}{tag}",
        **own_databases_env(f"{prefix}{tag}"),  # as the local stack deploys
        "SESSION_CORE_HTTP_PORT": str(port),
        "SESSION_CORE_HTTP_HOST": "127.0.0.1",
        "SESSION_CORE_API_KEYS": key_entry(TENANT, api_key),  # stored hashed
        "SESSION_CORE_TOPIC_PARTITIONS": "3",
        "SESSION_CORE_BINDING_WAIT_TIMEOUT_S": "20",
        "SESSION_CORE_RUNTIME_HEARTBEAT_TIMEOUT_S": "6",
        "SESSION_CORE_LOG_FORMAT": "json",
        **(extra_env or {}),
    }
    settings = Settings(**{"KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap,
                           "MONGODB_URI": stack.mongodb_uri, "topic_prefix": f"{prefix}{tag}.",
                           "mongodb_database": f"{prefix}{tag}",
                           **own_databases(f"{prefix}{tag}")})
    ids = {name: f"rt_{uuid.uuid4().hex}" for name in runtimes}
    c = Core(base_url=f"http://127.0.0.1:{port}", env=env, settings=settings, runtime_ids=ids,
             log_dir=log_dir)
    subprocess.run([sys.executable, "-m", "services.cli", "topics"], cwd=REPO, env=env,
                   check=True, stdin=subprocess.DEVNULL, timeout=120)
    try:
        for svc in SERVICES:
            # each service's /healthz, /readyz, /metrics on a port of its own, as in the chart
            hp = free_port()
            c.metrics_urls[svc] = f"http://127.0.0.1:{hp}/metrics"
            c.spawn(svc, svc, env={"SESSION_CORE_HEALTH_PORT": str(hp)})
        for name, args in runtimes.items():
            c.spawn(f"runtime-{name}", "runtime", "--runtime-id", ids[name], "--heartbeat-s",
                    "1", *args)
        c.wait_ready()
    except BaseException:
        with contextlib.suppress(StopFailed):  # the failed start's own error is the one raised
            c.stop_all()
        raise
    return c


@contextlib.contextmanager
def launched(stack: Any, log_dir: Path, runtimes: dict[str, list[str]], api_key: str,
             extra_env: dict[str, str] | None = None, prefix: str = "e", label: str = "e2e",
             show_logs: bool | None = None) -> Iterator[Core]:
    """``launch`` for a fixture: every process is stopped when the block ends, and where the
    logs are is said then (``show_logs``; by default when ``SESSION_CORE_E2E_KEEP_LOGS`` is
    set)."""
    c = launch(stack, log_dir, runtimes, api_key, extra_env, prefix)
    c.api_key = api_key
    try:
        yield c
    finally:
        c.stop_all()
        if show_logs or (show_logs is None and os.environ.get("SESSION_CORE_E2E_KEEP_LOGS")):
            sys.stderr.write(f"\n[{label}] logs in {c.log_dir}\n")

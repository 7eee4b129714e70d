"""The whole system as users run it: the four services and reference Runtimes as separate
processes (`session-core …`), started once per test run on the real stack with topics and a
database of their own; tests speak only the public surfaces (HTTP API, `session.input`,
`session.items`) — plus `runtime.control`, the reference Runtime's documented switch topic."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from shared.domain.tenancy import key_entry
from shared.kafka import encode
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.system import ItemCollector

REPO = Path(__file__).resolve().parents[2]
API_KEY = "e2e-key"

# Runtimes: placement `none` carries correct harnesses; `self_hosted` carries the ones tests
# switch into misbehaviour (runtime.control); `openai_hosted` has a Claude Code Runtime without
# message image support, for the capability tests.
RUNTIMES: dict[str, list[str]] = {
    "claude": ["--harness", "claude_code", "--placements", "none"],
    "claude_bad": ["--harness", "claude_code", "--placements", "self_hosted"],
    "claude_noimg": ["--harness", "claude_code", "--placements", "openai_hosted",
                     "--no-message-images", "--no-function-result-images"],
    "codex": ["--harness", "codex", "--placements", "none,openai_hosted"],
    "codex_bad": ["--harness", "codex", "--placements", "self_hosted",
                  "--no-function-result-images"],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Core:
    base_url: str
    env: dict[str, str]
    settings: Settings
    runtime_ids: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    log_dir: Path | None = None

    def spawn(self, name: str, *args: str, env: dict[str, str] | None = None
              ) -> subprocess.Popen[bytes]:
        assert self.log_dir is not None
        log = open(self.log_dir / f"{name}.log", "ab")
        p = subprocess.Popen([sys.executable, "-m", "services.cli", *args], cwd=REPO,
                             env={**self.env, **(env or {})}, stdout=log, stderr=log,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs[name] = p
        return p

    def stop_all(self, grace: float = 15.0) -> None:
        """SIGTERM every process at once, then SIGKILL what is left after ``grace`` seconds."""
        procs = [p for p in self.procs.values() if p.poll() is None]
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
        self.procs.clear()

    def stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)


@pytest.fixture(scope="session")
def core(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Core]:
    tag = uuid.uuid4().hex[:8]
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap,
        "MONGODB_URI": stack.mongodb_uri,
        "SESSION_CORE_TOPIC_PREFIX": f"e{tag}.",
        "SESSION_CORE_MONGODB_DATABASE": f"e{tag}",
        "SESSION_CORE_HTTP_PORT": str(port),
        "SESSION_CORE_HTTP_HOST": "127.0.0.1",
        "SESSION_CORE_API_KEYS": key_entry("e2e", API_KEY),  # stored hashed
        "SESSION_CORE_TOPIC_PARTITIONS": "3",
        "SESSION_CORE_BINDING_WAIT_TIMEOUT_S": "20",
        "SESSION_CORE_RUNTIME_HEARTBEAT_TIMEOUT_S": "6",
        "SESSION_CORE_LOG_FORMAT": "json",
    }
    settings = Settings(**{"KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap,
                           "MONGODB_URI": stack.mongodb_uri, "topic_prefix": f"e{tag}.",
                           "mongodb_database": f"e{tag}"})
    ids = {name: f"rt_{uuid.uuid4().hex}" for name in RUNTIMES}
    c = Core(base_url=f"http://127.0.0.1:{port}", env=env, settings=settings, runtime_ids=ids,
             log_dir=tmp_path_factory.mktemp("e2e-logs"))
    subprocess.run([sys.executable, "-m", "services.cli", "topics"], cwd=REPO, env=env,
                   check=True, stdin=subprocess.DEVNULL, timeout=120)
    for svc in ("storage", "dispatcher", "receipts", "admission"):
        c.spawn(svc, svc)
    for name, args in RUNTIMES.items():
        c.spawn(f"runtime-{name}", "runtime", "--runtime-id", ids[name], "--heartbeat-s", "1",
                *args)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{c.base_url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            dead = [n for n, p in c.procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(
                    f"--- {f.name}\n{f.read_text()[-3000:]}" for f in c.log_dir.glob("*.log"))
                raise RuntimeError(f"core did not get ready (dead: {dead})\n{logs}")
            time.sleep(0.3)
        yield c
    finally:
        c.stop_all()
        if os.environ.get("SESSION_CORE_E2E_KEEP_LOGS"):
            sys.stderr.write(f"\n[e2e] logs in {c.log_dir}\n")


@pytest.fixture(scope="session")
async def items(core: Core) -> AsyncIterator[ItemCollector]:
    col = ItemCollector(core.settings)
    await col.start()
    yield col
    await col.stop()


@pytest.fixture
async def api(core: Core) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=core.base_url, timeout=60,
                                 headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


class Control:
    """Sets the reference Runtimes' misbehaviour switches over `runtime.control`."""

    def __init__(self, core: Core, producer: AIOKafkaProducer) -> None:
        self.core = core
        self.producer = producer
        self.topic = topics_for(core.settings).runtime_control

    async def set(self, runtime: str, **switches: Any) -> None:
        rid = self.core.runtime_ids[runtime]
        await self.producer.send_and_wait(
            self.topic, encode({"schema": "runtime.control/1", "runtime_id": rid,
                                "set": switches}), key=rid.encode())
        await asyncio.sleep(0.5)  # the Runtime folds control records as they arrive


@pytest.fixture
async def control(core: Core) -> AsyncIterator[Control]:
    p = AIOKafkaProducer(bootstrap_servers=core.settings.kafka_bootstrap_servers, acks="all")
    await p.start()
    ctl = Control(core, p)
    touched: list[str] = []
    orig = ctl.set

    async def tracking(runtime: str, **switches: Any) -> None:
        touched.append(runtime)
        await orig(runtime, **switches)

    ctl.set = tracking  # type: ignore[method-assign]
    try:
        yield ctl
    finally:
        defaults = {"receipt_delay_s": 0.0, "release_calls": False, "replay": False,
                    "synthetic": False, "subagent": False, "alter_text": False,
                    "drop_image": False, "refuse_results": False, "fail_turns": False}
        for rt in set(touched):
            with contextlib.suppress(Exception):
                await orig(rt, **defaults)
        await p.stop()


def sse_events(raw: str) -> list[tuple[str, Any]]:
    out = []
    for block in raw.split("\n\n"):
        ev, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if ev:
            out.append((ev, data))
    return out

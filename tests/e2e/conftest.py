"""The whole system as users run it: the four services and reference Runtimes as separate
processes (`session-core …`), started once per test run on the real stack with topics and a
database of their own; tests speak only the public surfaces (HTTP API, `session.input`,
`session.items`) — plus `runtime.control`, the reference Runtime's documented switch topic."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from services.runtime.switches import Switches
from shared.kafka import assigned_consumer, decode, encode
from shared.topics import topics_for
from tests.support.processes import Core, launch
from tests.support.system import ItemCollector

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


@pytest.fixture(scope="session")
def core(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Core]:
    c = launch(stack, tmp_path_factory.mktemp("e2e-logs"), RUNTIMES, API_KEY)
    try:
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
    """Sets the reference Runtimes' misbehaviour switches over `runtime.control` and waits for
    the acknowledgement: the Runtime re-registers on `runtime.registrations` with the switches
    in force (services/runtime/app.py), so a test never runs against the old state."""

    ACK_TIMEOUT_S = 30.0

    def __init__(self, core: Core, producer: AIOKafkaProducer) -> None:
        self.core = core
        self.producer = producer
        self.topic = topics_for(core.settings).runtime_control
        self.state: dict[str, Switches] = {}

    async def set(self, runtime: str, **switches: Any) -> None:
        rid = self.core.runtime_ids[runtime]
        want = self.state.get(runtime, Switches()).updated(switches)
        regs = await assigned_consumer(self.core.settings,
                                       topics_for(self.core.settings).runtime_registrations,
                                       at_end=True)
        try:
            await self.producer.send_and_wait(
                self.topic, encode({"schema": "runtime.control/1", "runtime_id": rid,
                                    "set": switches}), key=rid.encode())
            await asyncio.wait_for(self._ack(regs, rid, want.active()), self.ACK_TIMEOUT_S)
        finally:
            await regs.stop()
        self.state[runtime] = want

    @staticmethod
    async def _ack(regs: AIOKafkaConsumer, rid: str, active: dict[str, Any]) -> None:
        """Until a registration of ``rid`` published after the control record reports
        exactly ``active``."""
        while True:
            batches = await regs.getmany(timeout_ms=500)
            for recs in batches.values():
                for r in recs:
                    reg = decode(r.value)
                    if reg.get("runtime_id") == rid and reg.get("switches") == active:
                        return


@pytest.fixture
async def control(core: Core) -> AsyncIterator[Control]:
    p = AIOKafkaProducer(bootstrap_servers=core.settings.kafka_bootstrap_servers, acks="all")
    await p.start()
    ctl = Control(core, p)
    try:
        yield ctl
    finally:
        try:
            # Back to the correct behaviour, acknowledged; a failed reset fails the test (the
            # next test would run against a misbehaving Runtime otherwise).
            for rt, sw in ctl.state.items():
                if sw.active():
                    await ctl.set(rt, **{k: getattr(Switches(), k) for k in sw.active()})
        finally:
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

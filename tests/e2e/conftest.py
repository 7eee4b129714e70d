"""The whole system as users run it: the four services and reference Runtimes as separate
processes (`session-core …`), started once per test run on the real stack with topics and a
database of their own; tests speak only the public surfaces (HTTP API, `session.input`,
`session.items`) — plus `runtime.control`, the reference Runtime's documented switch topic."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from shared.kafka import encode
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

"""The whole system as users run it: the four services and reference Runtimes as separate
processes (`session-core …`) on the real stack with topics and a database of their own, started
once per run of this package and stopped when a worker leaves it (an idle Core polls Kafka for
as long as it runs); tests speak only the public surfaces (HTTP API, `session.input`,
`session.items`) — plus `runtime.control`, the reference Runtime's documented switch topic."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from runtimes.switches import Switches
from tests.support.processes import Core, launched
from tests.support.public import API_KEY, Control
from tests.support.system import ItemCollector

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


@pytest.fixture(scope="package")
def core(stack: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Core]:
    with launched(stack, tmp_path_factory.mktemp("e2e-logs"), RUNTIMES, API_KEY) as c:
        yield c


@pytest.fixture(scope="package")
async def items(core: Core) -> AsyncIterator[ItemCollector]:
    async with ItemCollector(core.settings) as col:
        yield col


@pytest.fixture
async def api(core: Core) -> AsyncIterator[httpx.AsyncClient]:
    async with core.client() as c:
        yield c


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



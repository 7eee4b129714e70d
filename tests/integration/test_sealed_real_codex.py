"""Sealed deliveries with the real Codex (docs/security.md, "Sealed deliveries"): a Runtime
driving a real ``codex app-server`` asks for sealing; Core (with its seal key) seals the
Session's input and the function result to it. The model sees exactly what the user sent, the
agent's answer comes back, the receipt tracker matches Codex's own receipt against the sealed
result (``applied``), and ``runtime.deliveries`` carries none of the tenant's text."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from runtimes.app import RuntimeConfig, RuntimeService
from runtimes.codex.live import CodexLive
from runtimes.live import LiveOptions, default_binary
from scripted_model.server import ModelServer
from shared import sealing
from shared.kafka import decode
from shared.sealing import KeyPair
from tests.support.agent_turn import ANSWER, agent_items, script
from tests.support.kafka import read_topic
from tests.support.skips import unavailable
from tests.support.system import SystemFactory, items

pytestmark = pytest.mark.integration

try:
    default_binary("codex")
except FileNotFoundError:  # pragma: no cover - the install step puts it in the cache
    unavailable("codex not installed (python3 -m deploy.local.stack install)", module=True)


@pytest.fixture
def model() -> Iterator[ModelServer]:
    ms = ModelServer().start()
    yield ms
    ms.stop()


async def test_a_real_codex_turn_through_sealed_deliveries(
        make_system: SystemFactory, model: ModelServer) -> None:
    core = KeyPair.generate()
    system = await make_system(seal_key=core.private_text, require_sealed_deliveries=True)
    rid = f"rt_{uuid.uuid4().hex}"
    runtime = RuntimeService(
        system.settings,
        RuntimeConfig(runtime_id=rid, harness="codex", placements=["none"],
                      sealed_deliveries=True),
        live=CodexLive(LiveOptions(runtime_id=rid, harness="codex",
                                   model_base_url=model.url + "/v1")))
    await runtime.start()
    try:
        k = f"SEALED-{uuid.uuid4().hex[:10]}"
        model.scripts.register(k, script({"tool_call": {"name": "get_weather",
                                                           "arguments": {"city": "Oslo"}}}))
        question = f"{k} what is the weather in Oslo, privately?"
        r = await system.create("codex", question)
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        call = await system.items.wait_for(sid, lambda i: i["type"] == "function_call",
                                           timeout=90)
        result = "foggy, 4°C, tenant-secret-7c2e"
        r = await system.event(sid, {"type": "agent.session.input.tool_result",
                                     "call_id": call["call_id"], "success": True,
                                     "output": result}, wait="true", timeout_ms="120000")
        assert r.status_code == 200, r.text
        [final] = [i for i in agent_items(r.json()["items"]) if i["phase"] == "final_answer"]
        assert final["content"] == [{"type": "output_text", "text": ANSWER}]
        app = await system.items.wait_for(
            sid, lambda i: i["type"] == "function_call_application", timeout=30)
        assert app["state"] == "applied", app

        # what the model received: the user's text and the function's result, exactly
        bodies = " ".join(json.dumps(req.body, ensure_ascii=False)
                          for req in model.scripts.recorded(k))
        assert question in bodies and result in bodies

        raw = await read_topic(system.settings, system.topics.runtime_deliveries)
        for value in raw:  # the bytes on the topic, every Runtime's
            assert k.encode() not in value and b"tenant-secret-7c2e" not in value
        mine = [d for d in map(decode, raw) if d.get("runtime_id") == rid]
        assert {d["kind"] for d in mine} >= {"start", "function_result"}
        for d in mine:
            assert sealing.is_sealed(d) and "messages" not in d and "content" not in d
        stored = await items(system, sid)
        assert [i["state"] for i in stored if i["type"] == "turn"] == ["started", "completed"]
    finally:
        await runtime.stop()

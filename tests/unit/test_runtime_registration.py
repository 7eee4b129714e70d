"""The registration and control records of the reference Runtime (runtimes/app.py)."""

from __future__ import annotations

import asyncio
import base64
import json
from types import SimpleNamespace

from runtimes.app import (
    RuntimeConfig,
    RuntimeService,
    consumer_group,
    registration,
)
from runtimes.harness import SimulatedHarness
from runtimes.switches import Switches
from shared.kafka import DeadLetters, encode
from shared.records import control_record
from shared.settings import Settings

RT = "rt_" + "c" * 32


def test_registration_record_shape() -> None:
    cfg = RuntimeConfig(runtime_id=RT, harness="claude_code", function_result_images=False)
    h = SimulatedHarness(runtime_id=RT, harness="claude_code", function_result_images=False,
                         switches=Switches(alter_text=True))
    rec = registration(cfg, h, "ready")
    assert rec["schema"] == "runtime.registration/1"
    assert rec["runtime_id"] == RT and rec["harness"] == "claude_code"
    assert rec["bridge_protocol"] == 3 and rec["placements"] == ["none", "self_hosted"]
    assert rec["capabilities"] == {"message_images": True, "function_result_images": False}
    assert rec["status"] == "ready" and rec["heartbeat_at"].endswith("Z")
    assert rec["switches"] == {"alter_text": True}


def test_consumer_group_is_per_runtime() -> None:
    assert consumer_group(RT) == f"session-core-runtime-{RT}"


def _rec(value: bytes, key: str = RT, offset: int = 0) -> SimpleNamespace:
    return SimpleNamespace(topic="runtime.control", partition=0, offset=offset,
                           key=key.encode(), value=value)


def test_control_records_change_switches_and_status() -> None:
    async def go() -> None:
        svc = RuntimeService(Settings(), RuntimeConfig(runtime_id=RT, harness="codex"))
        sent: list[tuple[str, bytes, bytes | None]] = []

        async def send(topic: str, value: bytes, key: bytes | None) -> None:
            sent.append((topic, value, key))

        svc.dlq = DeadLetters(send, svc.topics)
        assert await svc._apply_control(_rec(encode(control_record(
            RT, {"replay": True, "status": "draining"}))))
        assert svc.harness.switches.active() == {"replay": True}
        assert svc.status == "draining"
        assert sent == []
        # other runtimes: not this one's business, nothing applied, nothing dead-lettered
        other = "rt_" + "d" * 32
        assert not await svc._apply_control(_rec(encode(control_record(
            other, {"drop_image": True})), key=other))
        assert not await svc._apply_control(_rec(b"not json", key=other))
        assert sent == []
        # bad values, wrong schema, not JSON, addressed to this runtime: dead-lettered
        bad = [encode(control_record(RT, {"replay": "maybe", "drop_image": True})),
               encode({"schema": "x", "runtime_id": RT, "set": {"drop_image": True}}),
               encode({"schema": "runtime.control/1", "runtime_id": RT, "set": []}),
               b"not json"]
        for n, raw in enumerate(bad):
            assert not await svc._apply_control(_rec(raw, offset=n))
        assert svc.harness.switches.active() == {"replay": True}
        assert [t for t, _, _ in sent] == ["runtime.control.dlq"] * 4
        envelopes = [json.loads(v) for _, v, _ in sent]
        assert [base64.b64decode(e["value_b64"]) for e in envelopes] == bad
        assert [e["offset"] for e in envelopes] == [0, 1, 2, 3]
        assert [e["reason"] for e in envelopes] == [
            "unprocessable", "unexpected_schema", "invalid_fields", "undecodable"]

    asyncio.run(go())

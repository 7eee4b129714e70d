"""The registration and control records of the reference Runtime (services/runtime/app.py)."""

from __future__ import annotations

import asyncio

from services.runtime.app import (
    RuntimeConfig,
    RuntimeService,
    consumer_group,
    control_record,
    registration,
)
from services.runtime.harness import SimulatedHarness
from services.runtime.switches import Switches
from shared.kafka import encode
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


def test_control_records_change_switches_and_status() -> None:
    async def go() -> None:
        svc = RuntimeService(Settings(), RuntimeConfig(runtime_id=RT, harness="codex"))
        assert svc._apply_control(encode(control_record(RT, {"replay": True,
                                                            "status": "draining"})))
        assert svc.harness.switches.active() == {"replay": True}
        assert svc.status == "draining"
        # other runtimes, bad values, wrong schema: ignored, nothing applied
        assert not svc._apply_control(encode(control_record("rt_" + "d" * 32,
                                                            {"drop_image": True})))
        assert not svc._apply_control(encode(control_record(RT, {"replay": "maybe",
                                                                 "drop_image": True})))
        assert not svc._apply_control(encode({"schema": "x", "runtime_id": RT,
                                              "set": {"drop_image": True}}))
        assert not svc._apply_control(b"not json")
        assert svc.harness.switches.active() == {"replay": True}

    asyncio.run(go())

"""The dispatcher's Runtime registry reads ``runtime.registrations`` through the typed decoder
(shared.messages.runtime.RuntimeRegistration): a malformed registration goes to the DLQ with the
field and the reason, and the registrations after it are still read."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from structlog.testing import capture_logs

from services.dispatcher.registry import RegistryTail
from shared import records
from shared.domain.poison import INVALID_FIELDS, Poison
from shared.settings import Settings

RT = "rt_" + "a" * 32


def _reg(**fields: Any) -> bytes:
    return json.dumps({"schema": records.REGISTRATION, "runtime_id": RT, "harness": "codex",
                       "bridge_protocol": 3, "placements": ["none"], "status": "ready",
                       "capabilities": {"message_images": True, "function_result_images": False},
                       "heartbeat_at": "2026-11-30T10:00:00Z", **fields}).encode()


def test_a_malformed_registration_is_dead_lettered_with_its_reason_and_reading_goes_on() -> None:
    dead: list[tuple[int, Poison]] = []

    class Dlq:
        async def record(self, r: Any, poison: Poison) -> None:
            dead.append((r.offset, poison))

    changed: list[str] = []
    tail = RegistryTail(Settings(), "t.runtime.registrations",
                        lambda rt: changed.append(rt.status), Dlq())  # type: ignore[arg-type]
    bad = [_reg(status="exploded"), _reg(placements=["none", 3]), _reg(bridge_protocol="3"),
           _reg(heartbeat_at="2026-11-30T10:00:00")]
    raws = [*bad, _reg(status="draining")]

    async def go() -> None:
        for n, raw in enumerate(raws):
            await tail._one(SimpleNamespace(topic="t.runtime.registrations", partition=0,
                                            offset=n, key=RT.encode(), value=raw))

    asyncio.run(go())
    assert [n for n, _ in dead] == [0, 1, 2, 3]
    assert {p.code for _, p in dead} == {INVALID_FIELDS}
    for field, (_, p) in zip(("status", "placements.1", "bridge_protocol", "heartbeat_at"),
                             dead, strict=True):
        assert p.detail.startswith(f"{records.REGISTRATION}: {field}: "), p.detail
    assert changed == ["draining"] and tail.runtimes[RT].status == "draining"


def test_a_runtime_back_as_a_new_process_is_logged_once_per_process() -> None:
    """The same Runtime registering with another ``incarnation`` (restarted under its id) is
    logged ``registry.runtime_restarted`` — what operators and the chaos row's probe go by —
    once per new process, not on every heartbeat; a Runtime that reports none never is."""
    tail = RegistryTail(Settings(), "t.runtime.registrations", lambda rt: None,
                        SimpleNamespace())  # type: ignore[arg-type]
    first, second = "1" * 32, "2" * 32
    with capture_logs() as logs:
        for raw in (_reg(incarnation=first), _reg(incarnation=first), _reg(incarnation=second),
                    _reg(incarnation=second), _reg(), _reg()):
            tail.dispatch(json.loads(raw))
    restarts = [e for e in logs if e["event"] == "registry.runtime_restarted"]
    assert [(e["runtime_id"], e["before"], e["incarnation"]) for e in restarts] == [
        (RT, first, second)]

"""The Runtime side of ``kind: "interrupt"`` (issue 57 item 8): Core failed a Turn the Runtime
runs, and the Runtime ends the native Turn — Codex ``turn/interrupt``, Claude Code an
``interrupt`` control request, the simulated harness its failed end (calls released first) —
and does nothing for a Turn it is not running (docs/runtime-boundary.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from runtimes.claude.state import Session
from runtimes.codex.live import _Proc
from runtimes.harness import SimulatedHarness
from shared.domain import wire
from tests.support.codex_live import driver_with_session
from tests.unit.test_real_claude_records import live, session, turn

NATIVE_TURN = "01a24b80-4e22-7cb3-aa40-2ec502013228"
REASON = "message_images_unsupported: runtime rt_1 does not report message image support"


def interrupt(turn_id: str, did: str = "int_1") -> dict[str, Any]:
    return wire.interrupt_delivery(delivery_id=did, runtime_id="rt_1", session_id="session_a",
                                   turn_id=turn_id, reason=REASON)


def test_codex_interrupts_the_running_native_turn_only(tmp_path: Path) -> None:
    h, proc, out = driver_with_session(tmp_path, "thread_1", NATIVE_TURN)
    sent: list[tuple[str, dict[str, Any]]] = []

    async def request(_proc: _Proc, method: str, params: dict[str, Any]) -> dict[str, Any]:
        sent.append((method, params))
        return {}

    h._request = request  # type: ignore[method-assign]
    asyncio.run(h._interrupt("session_a", interrupt("turn_other")))
    assert sent == [] and out == []
    asyncio.run(h._interrupt("session_a", interrupt("turn_1")))
    assert sent == [("turn/interrupt", {"threadId": "thread_1", "turnId": NATIVE_TURN})]
    assert out == []  # the end is what codex prints (turn/completed interrupted), forwarded


def test_claude_interrupts_the_running_native_turn_with_cores_reason(tmp_path: Path) -> None:
    h, out = live(tmp_path)
    t = turn()
    s = session(tmp_path, t)
    written: list[dict[str, Any]] = []

    async def write(_s: Session, record: dict[str, Any]) -> None:
        written.append(record)

    h._write = write  # type: ignore[method-assign]
    h._spawn_task = lambda coro: coro.close()  # type: ignore[method-assign,assignment]
    asyncio.run(h._interrupt(s, interrupt("turn_other")))
    assert written == [] and not t.ending
    asyncio.run(h._interrupt(s, interrupt(t.core_turn_id)))
    assert [(w["type"], w["request"]["subtype"]) for w in written] == [
        ("control_request", "interrupt")]
    assert t.ending and t.end_reason == REASON
    assert [r for r in out if r.get("refusal")] == []


def test_the_simulated_harness_ends_the_turn_releasing_its_calls() -> None:
    h = SimulatedHarness(runtime_id="rt_1", harness="codex")
    h.handle(wire.message_delivery(
        delivery_id="dlv_1", runtime_id="rt_1", session_id="session_a", turn_id="turn_1",
        kind="start", messages=[{"role": "user", "content": [
            {"type": "input_text", "text": 'call f {"a": 1}'}]}]), 0.0)
    assert h.handle(interrupt("turn_other", "int_0"), 0.1) == []
    out = [e.record for e in h.handle(interrupt("turn_1"), 0.2)]
    methods = [r["native"]["method"] for r in out]
    assert methods == ["item/released", "turn/completed"], methods
    assert out[-1]["end_reason"] == REASON and out[-1]["turn_id"] == "turn_1"
    assert h.sessions["session_a"].turn is None
    assert h.handle(interrupt("turn_1", "int_2"), 0.3) == []  # no Turn runs: nothing

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


# A restarted Runtime process is told of its predecessor's Turns by an ``interrupt`` (the
# dispatcher's ``Binder.restarts``); steers of such a Turn may still follow it on the topic
# (storage decided them while the Turn ran). The process runs no such Turn: without knowing it
# is over, it opened a native Turn under the failed Turn's id for the first steer and completed
# it — a Turn Core shows as failed and the harness as completed (the chaos suite's Runtime-
# process row, with a burst of steers). Each steer is refused ``turn_ended`` instead, so Core
# hands its messages over again as the next Turn.

def steer(turn_id: str, did: str = "dlv_9") -> dict[str, Any]:
    return wire.message_delivery(
        delivery_id=did, runtime_id="rt_1", session_id="session_a", turn_id=turn_id,
        kind="steer", messages=[{"role": "user", "content": [
            {"type": "input_text", "text": "and?"}]}])


def refusal_codes(out: list[dict[str, Any]]) -> list[Any]:
    return [r["refusal"].get("code") for r in out if r.get("refusal")]


def test_codex_refuses_a_steer_of_a_turn_it_was_told_is_over(tmp_path: Path) -> None:
    h, proc, out = driver_with_session(tmp_path, "thread_1", NATIVE_TURN)
    proc.turn = None  # a fresh process: no Turn runs
    sent: list[str] = []

    async def request(_proc: _Proc, method: str, params: dict[str, Any]) -> dict[str, Any]:
        sent.append(method)
        return {}

    h._request = request  # type: ignore[method-assign]
    asyncio.run(h._interrupt("session_a", interrupt("turn_old")))
    asyncio.run(h._messages("session_a", steer("turn_old")))
    assert refusal_codes(out) == [wire.REFUSAL_TURN_ENDED]
    assert sent == [] and proc.turn is None  # no turn/start: nothing ran


def test_claude_refuses_a_steer_of_a_turn_it_was_told_is_over(tmp_path: Path) -> None:
    h, out = live(tmp_path)
    s = session(tmp_path, turn())
    s.turn = None  # a fresh process: no Turn runs
    written: list[dict[str, Any]] = []
    spawned: list[Session] = []

    async def write(_s: Session, record: dict[str, Any]) -> None:
        written.append(record)

    async def spawn(s_: Session) -> None:
        spawned.append(s_)

    h._write = write  # type: ignore[method-assign]
    h._spawn = spawn  # type: ignore[method-assign]
    h._spawn_task = lambda coro: coro.close()  # type: ignore[method-assign,assignment]
    asyncio.run(h._interrupt(s, interrupt("turn_old")))
    asyncio.run(h._messages(s, steer("turn_old")))
    assert refusal_codes(out) == [wire.REFUSAL_TURN_ENDED]
    assert written == [] and spawned == [] and s.turn is None


def test_the_simulated_harness_refuses_a_steer_of_a_turn_it_was_told_is_over() -> None:
    h = SimulatedHarness(runtime_id="rt_1", harness="codex")
    assert h.handle(interrupt("turn_old"), 0.0) == []
    out = [e.record for e in h.handle(steer("turn_old"), 0.1)]
    assert refusal_codes(out) == [wire.REFUSAL_TURN_ENDED]
    assert h.sessions["session_a"].turn is None

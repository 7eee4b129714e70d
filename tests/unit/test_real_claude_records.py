"""The live Claude Code driver's reading of what the real binary prints (records shaped as
Claude Code 2.1.328 printed them under the conformance kit): a call the harness answered itself
is released, and an interrupt that finds nothing running still ends the Turn."""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

from runtimes.claude.live import ClaudeLive
from runtimes.claude.state import Session, Turn
from runtimes.harness import Emit
from runtimes.live import LiveOptions
from shared.domain import receipts
from shared.domain.harnesses.claude_code import ClaudeTurn
from shared.domain.observations import TurnEnded, classify

NATIVE = "1ebcf56a-4199-4d7e-9711-c94419a04bac"
CALL = "toolu_ec434dfa4ffb4ba18f2c9dd6"


def live(tmp_path: Path) -> tuple[ClaudeLive, list[dict[str, Any]]]:
    out: list[dict[str, Any]] = []
    h = ClaudeLive(LiveOptions(runtime_id="rt_1", harness="claude_code",
                               model_base_url="http://127.0.0.1:9", binary="/bin/false",
                               work_dir=tmp_path))

    def emit(emits: list[Emit]) -> None:
        out.extend(e.record for e in emits)

    h._emit = emit
    return h, out


def session(tmp_path: Path, turn: Turn) -> Session:
    s = Session("session_a", tmp_path, native_id=NATIVE)
    s.turn = turn
    s.proc = types.SimpleNamespace(returncode=None)  # type: ignore[assignment]
    return s


def turn() -> Turn:
    return Turn("turn_1", {"delivery_id": "dlv_1", "session_id": "session_a",
                            "turn_id": "turn_1", "kind": "start"},
                 ClaudeTurn(native_session_id=NATIVE))


def call_record() -> dict[str, Any]:
    return {"type": "assistant", "parent_tool_use_id": None, "session_id": NATIVE,
            "message": {"role": "assistant", "content": [
                {"type": "tool_use", "id": CALL, "name": "mcp__core__slow_tool",
                 "input": {"case": "release"}}]}}


def rejected_record() -> dict[str, Any]:
    return {"type": "user", "parent_tool_use_id": None, "session_id": NATIVE,
            "uuid": "f930277f-fcef-4111-b462-906ebdbe03d1",
            "message": {"role": "user", "content": [{
                "type": "tool_result", "tool_use_id": CALL, "is_error": True,
                "content": "The user doesn't want to proceed with this tool use. …"}]},
            "tool_use_result": "User rejected tool use",
            "tool_result_meta": [{"id": CALL, "non_execution_kind": "user-rejected"}]}


def expected(success: bool) -> receipts.Expected:
    return receipts.expect(harness="claude_code", session_id="session_a", call_id=CALL,
                           name="slow_tool", success=success,
                           content=[{"type": "input_text", "text": "late"}],
                           native_session_id=NATIVE)


def test_a_call_the_harness_answered_itself_is_released_and_a_later_result_refused(
        tmp_path: Path) -> None:
    h, out = live(tmp_path)
    s = session(tmp_path, turn())
    h._on_record(s, call_record())
    h._on_record(s, rejected_record())
    natives = [r["native"] for r in out]
    assert natives[1] == rejected_record()  # forwarded exactly as printed, then the release
    assert natives[2] == {"type": "tool_release", "session_id": NATIVE, "tool_use_id": CALL,
                          "synthesized": True}
    assert isinstance(receipts.match_observation(expected(True), out[2]), receipts.Released)
    # the harness's own answer never confirms a result
    assert isinstance(receipts.match_observation(expected(True), out[1]), receipts.NotAMatch)
    asyncio.run(h._function_result(s, {
        "delivery_id": "dlv_2", "session_id": "session_a", "turn_id": "turn_1",
        "kind": "function_result", "call_id": CALL, "success": True,
        "content": [{"type": "input_text", "text": "late"}]}))
    assert out[-1]["native"] is None and out[-1]["refusal"]["call_id"] == CALL
    assert out[-1]["refusal"]["terminal"] is True


def test_a_result_core_answered_is_not_a_release(tmp_path: Path) -> None:
    h, out = live(tmp_path)
    s = session(tmp_path, turn())
    h._on_record(s, call_record())
    s.answered.add(CALL)
    h._on_record(s, rejected_record())
    assert [r["native"]["type"] for r in out] == ["assistant", "user"]


def test_an_interrupt_that_finds_nothing_running_ends_the_turn(tmp_path: Path) -> None:
    h, out = live(tmp_path)
    t = turn()
    t.written = {"u1", "u2"}
    t.unconsumed = {"u1", "u2"}
    t.ending, t.interrupt_id, t.end_reason = True, "req_1", "turn_message_bound_exceeded: …"
    s = session(tmp_path, t)
    for u in ("u1", "u2"):
        h._on_record(s, {"type": "command_lifecycle", "command_uuid": u, "state": "queued"})
        h._on_record(s, {"type": "command_lifecycle", "command_uuid": u, "state": "cancelled"})
    h._on_record(s, {"type": "control_response", "response": {
        "subtype": "success", "request_id": "req_1", "response": {
            "still_queued": [], "cancelled": ["u1", "u2"]}}})
    end = out[-1]
    assert end["native"]["synthesized"] is True
    assert classify("claude_code", end["native"]) == TurnEnded("failed", None)
    assert end["end_reason"] == "turn_message_bound_exceeded: …"
    assert s.turn is None and t.ended.is_set()


def test_an_interrupt_of_a_running_command_waits_for_its_result(tmp_path: Path) -> None:
    h, out = live(tmp_path)
    t = turn()
    t.written = {"u1"}
    t.ending, t.interrupt_id = True, "req_1"
    s = session(tmp_path, t)
    h._on_record(s, {"type": "command_lifecycle", "command_uuid": "u1", "state": "started"})
    h._on_record(s, {"type": "control_response", "response": {
        "subtype": "success", "request_id": "req_1", "response": {"still_queued": []}}})
    assert s.turn is t and not any((r["native"] or {}).get("synthesized") for r in out)
    h._on_record(s, {"type": "result", "subtype": "error_during_execution", "is_error": True,
                     "session_id": NATIVE})
    assert s.turn is None and out[-1]["native"]["type"] == "result"

"""The simulated Codex (reference Runtime): the app-server records the echo model prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtimes.simulation import (
    SYNTHETIC_TEXT,
    Call,
    Json,
    Session,
    ShapesBase,
    Turn,
    misbehave_blocks,
)
from runtimes.switches import Switches
from shared.domain.harnesses import AdapterError, codex


class CodexShapes(ShapesBase):
    harness = codex.HARNESS

    def session_id(self) -> str:
        return f"thr_{self._new_hex()}"

    def call_id(self) -> str:
        return f"call_{self._new_hex()}"

    def open_turn(self, session: Session, core_turn_id: str, now: float,
                  max_user_messages: int) -> Turn:
        return Turn(core_turn_id, f"turn_{self._new_hex()}", now)

    def started(self, session: Session, turn: Turn) -> Json:
        return {
            "method": "turn/started",
            "params": {"threadId": session.native_id, "turn": {"id": turn.native_turn_id,
                                                                "status": "inProgress"}},
        }

    def end(self, session: Session, turn: Turn, failed: bool) -> Json:
        return _turn_record("turn/completed", session.native_id, turn.native_turn_id,
                            status="failed" if failed else "completed")

    def release(self, session: Session, turn: Turn, call: Call) -> Json:
        return _turn_record("item/released", session.native_id, turn.native_turn_id,
                            callId=call.call_id)

    def encode(self, session: Session, turn: Turn, delivery: Mapping[str, Any],
               messages: Sequence[Mapping[str, Any]], opening: bool
               ) -> list[Json] | AdapterError:
        items = codex.flatten_messages(messages)
        if isinstance(items, AdapterError):
            return items
        return [_turn_record("item/completed", session.native_id, turn.native_turn_id, item={
            "type": "userMessage", "id": f"msg_{self._new_hex()}", "content": items})]

    def assistant_text(self, session: Session, turn: Turn, text: str) -> Json:
        return _turn_record("item/completed", session.native_id, turn.native_turn_id, item={
            "type": "agentMessage", "id": f"msg_{self._new_hex()}", "text": text})

    def call(self, session: Session, turn: Turn, call: Call) -> Json:
        return _turn_record("item/started", session.native_id, turn.native_turn_id, item={
            "type": "dynamicToolCall", "id": call.call_id, "tool": call.name,
            "arguments": call.arguments})

    def apply(self, session: Session, turn: Turn, call: Call, success: bool,
              content: Sequence[Mapping[str, Any]], sw: Switches) -> Json | AdapterError:
        if sw.release_calls:
            return self.release(session, turn, call)
        items = codex.content_items(content)
        if isinstance(items, AdapterError):
            return items
        thread_id, turn_id = session.native_id, turn.native_turn_id
        status, ok = codex.expected_status(success), success
        if sw.synthetic:
            status, ok = "failed", False
            items = [{"type": "inputText", "text": SYNTHETIC_TEXT}]
        if sw.replay:
            turn_id = f"turn_{self._new_hex()}"  # replayed under a turn that is not the call's
        if sw.subagent:
            thread_id = f"thr_{self._new_hex()}"  # a child (Subagent) thread
        return _turn_record("item/completed", thread_id, turn_id, item={
            "type": "dynamicToolCall", "id": call.call_id, "tool": call.name,
            "arguments": call.arguments, "status": status, "success": ok,
            "contentItems": misbehave_blocks(items, sw, "inputText", "inputImage"),
        })


def _turn_record(method: str, thread_id: str, turn_id: str, **params: Any) -> Json:
    """An app-server notification about one thread's Turn (``params``: the thread, the Turn,
    then ``params``)."""
    return {"method": method, "params": {"threadId": thread_id, "turnId": turn_id, **params}}

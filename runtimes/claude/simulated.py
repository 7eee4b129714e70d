"""The simulated Claude Code (reference Runtime): the stream-json records the echo model prints,
with the bridge's per-Turn bookkeeping (``ClaudeTurn``: UUIDs, the 64 bound)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtimes.simulation import (
    Call,
    Json,
    Session,
    ShapesBase,
    Turn,
    misbehave_blocks,
    uuid_from_hex,
)
from runtimes.switches import Switches
from shared.domain.harnesses import AdapterError
from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses.claude_code import ClaudeTurn


class ClaudeShapes(ShapesBase):
    harness = claude.HARNESS

    def session_id(self) -> str:
        return uuid_from_hex(self._new_hex())

    def call_id(self) -> str:
        return f"toolu_{self._new_hex()}"

    def open_turn(self, session: Session, core_turn_id: str, now: float,
                  max_user_messages: int) -> Turn:
        turn = Turn(core_turn_id, f"{session.native_id}#{session.turns_started}", now)
        turn.claude = ClaudeTurn(
            max_user_messages=max_user_messages,
            native_session_id=session.native_id,
            uuid_factory=lambda: uuid_from_hex(self._new_hex()),
        )
        return turn

    def started(self, session: Session, turn: Turn) -> Json:
        return {"type": "system", "subtype": "init", "session_id": session.native_id}

    def end(self, session: Session, turn: Turn, failed: bool) -> Json:
        return {
            "type": "result",
            "session_id": session.native_id,
            "subtype": "error" if failed else "success",
            "is_error": failed,
        }

    def release(self, session: Session, turn: Turn, call: Call) -> Json:
        return {"type": "tool_release", "session_id": session.native_id,
                "tool_use_id": call.call_id}

    def encode(self, session: Session, turn: Turn, delivery: Mapping[str, Any],
               messages: Sequence[Mapping[str, Any]], opening: bool
               ) -> list[Json] | AdapterError:
        assert turn.claude is not None
        batch_id = str(delivery.get("delivery_id"))
        encoded = (turn.claude.open if opening else turn.claude.steer)(batch_id, messages)
        if isinstance(encoded, AdapterError):
            return encoded
        for native in encoded:
            turn.claude.consumed(native["uuid"])
        return [{**native, "isReplay": True} for native in encoded]

    def assistant_text(self, session: Session, turn: Turn, text: str) -> Json:
        return self._assistant(session, {"type": "text", "text": text})

    def call(self, session: Session, turn: Turn, call: Call) -> Json:
        return self._assistant(session, {"type": "tool_use", "id": call.call_id,
                                         "name": call.name, "input": call.arguments})

    def _assistant(self, session: Session, block: Json) -> Json:
        """A root ``assistant`` record whose message holds ``block``."""
        return {
            "type": "assistant",
            "uuid": uuid_from_hex(self._new_hex()),
            "session_id": session.native_id,
            "parent_tool_use_id": None,
            "message": {"role": "assistant", "content": [block]},
        }

    def apply(self, session: Session, turn: Turn, call: Call, success: bool,
              content: Sequence[Mapping[str, Any]], sw: Switches) -> Json | AdapterError:
        if sw.release_calls:
            return self.release(session, turn, call)
        native = claude.tool_result_message(
            call.call_id, success, content, native_session_id=session.native_id,
            uuid=uuid_from_hex(self._new_hex()),
        )
        if isinstance(native, AdapterError):
            return native
        native = {**native, "isReplay": sw.replay, "isSynthetic": sw.synthetic}
        if sw.subagent:
            native["parent_tool_use_id"] = f"toolu_{self._new_hex()}"
        block = native["message"]["content"][0]
        block["content"] = misbehave_blocks(block["content"], sw, "text", "image")
        return native

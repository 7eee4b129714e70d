"""The simulated MiniMax Code (reference Runtime): text-only, no public functions; its bridge
prints Claude Code's record shapes (``result`` ends a Turn), one user record per prompt."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtimes.claude.simulated import ClaudeShapes
from runtimes.simulation import Call, Json, Session, Turn
from runtimes.switches import Switches
from shared.domain.harnesses import AdapterError
from shared.domain.harnesses import minimax_code as text_only


class MinimaxShapes(ClaudeShapes):
    harness = text_only.HARNESS
    text_only = True

    def call_id(self) -> str:
        return f"call_{self._new_hex()}"

    def open_turn(self, session: Session, core_turn_id: str, now: float,
                  max_user_messages: int) -> Turn:
        return Turn(core_turn_id, f"{session.native_id}#{session.turns_started}", now)

    def encode(self, session: Session, turn: Turn, delivery: Mapping[str, Any],
               messages: Sequence[Mapping[str, Any]], opening: bool
               ) -> list[Json] | AdapterError:
        prompts = text_only.encode_messages(messages)
        if isinstance(prompts, AdapterError):
            return prompts
        return [
            {"type": "user", "session_id": session.native_id, "isReplay": True,
             "message": {"role": "user", "content": prompt}}
            for prompt in prompts
        ]

    def apply(self, session: Session, turn: Turn, call: Call, success: bool,
              content: Sequence[Mapping[str, Any]], sw: Switches) -> Json | AdapterError:
        return text_only.encode_function_result(call.call_id, success, content)

"""Storage turns a Runtime's native Turn end into a ``turn`` fact; a bridge that ended the
Turn itself (the Claude Code 64-message bound) gives its reason on the envelope
(``end_reason``, docs/runtime-boundary.md)."""

from __future__ import annotations

from typing import Any

import pytest

from services.storage.handler import record_to_inputs


def _end(subtype: str, **extra: Any) -> dict[str, Any]:
    return {"schema": "runtime.observation/1", "runtime_id": "rt_1",
            "session_id": "session_" + "1" * 32, "observed_at": "2026-11-30T10:00:00Z",
            "harness": "claude_code", "turn_id": "turn_1", "observation_id": "obs_1",
            "native": {"type": "result", "session_id": "n-1", "subtype": subtype}, **extra}


@pytest.mark.parametrize(("subtype", "extra", "state", "reason"), [
    ("success", {}, "completed", None),
    ("success", {"end_reason": "ignored on a completed end"}, "completed", None),
    ("error", {}, "failed", "the harness ended the turn"),
    ("error", {"end_reason": "turn_message_bound_exceeded: over 64"}, "failed",
     "the runtime ended the native Turn: turn_message_bound_exceeded: over 64"),
    ("error", {"end_reason": ""}, "failed", "the harness ended the turn"),
    ("error", {"end_reason": 7}, "failed", "the harness ended the turn"),
])
def test_turn_end_reason(subtype: str, extra: dict[str, Any], state: str,
                         reason: str | None) -> None:
    [fact] = record_to_inputs(_end(subtype, **extra))
    assert (fact["kind"], fact["turn_id"], fact["state"], fact["reason"]) == (
        "turn", "turn_1", state, reason)

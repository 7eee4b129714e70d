"""The user CLI shows what the agent said (``session-core-cli tail``, ``send --wait``,
``items``): ``agent: …`` lines, the Turn's final answer marked and shown whole, the Turn's
usage on its end."""

from __future__ import annotations

from typing import Any

import pytest

from session_core_client.cli import render

ANSWER = "  It is sunny.\n\n" + "x" * 200 + "  "


def agent(text: str, phase: str) -> dict[str, Any]:
    return {"sequence": 5, "created_at": "2026-01-01T10:00:00.000Z", "type": "message",
            "role": "agent", "turn_id": "t", "phase": phase, "phase_source": "derived",
            "content": [{"type": "output_text", "text": text}]}


@pytest.mark.parametrize(("item", "want"), [
    (agent("Let me look.", "commentary"), 'agent: "Let me look."'),
    (agent(ANSWER, "final_answer"),
     'agent (final answer): "  It is sunny.\\n\\n' + "x" * 200 + '  "'),  # whole, exact
    ({"sequence": 6, "type": "turn", "turn_id": "t", "state": "completed", "reason": None,
      "usage": {"input_tokens": 120, "output_tokens": 30, "cached_input_tokens": 64}},
     "t COMPLETED (tokens: 120 in, 64 cached, 30 out)"),
])
def test_agent_lines(item: dict[str, Any], want: str) -> None:
    assert render.item_line(item).endswith(want)


def test_commentary_is_cut_short() -> None:
    line = render.item_line(agent("y" * 500, "commentary"))
    assert len(line) < 200 and line.endswith('…"')


def test_a_turn_without_usage_shows_none() -> None:
    line = render.item_line({"sequence": 6, "type": "turn", "turn_id": "t", "state": "failed",
                             "reason": "gone", "usage": None})
    assert line.endswith("t FAILED — gone")

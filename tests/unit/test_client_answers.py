"""``session_core_client.answers``: the final answer (and the agent's other messages) picked out
of Items as any read of the API returns them."""

from __future__ import annotations

from typing import Any

import pytest

from session_core_client.answers import agent_messages, agent_text, final_answer, final_answers


def agent(turn: str, text: str, phase: str) -> dict[str, Any]:
    return {"type": "message", "role": "agent", "turn_id": turn, "phase": phase,
            "phase_source": "derived", "content": [{"type": "output_text", "text": text}]}


USER = {"type": "message", "role": "user", "turn_id": "t1",
        "content": [{"type": "input_text", "text": "weather?"}]}
CALL = {"type": "function_call", "turn_id": "t1", "call_id": "c", "name": "f", "arguments": {}}
END = {"type": "turn", "turn_id": "t1", "state": "completed", "reason": None, "usage": None}
TURN1 = [USER, agent("t1", "Let me look.", "commentary"), CALL,
         agent("t1", "  Sunny.\n\n", "final_answer"), END]
TURN2 = [{**USER, "turn_id": "t2"}, agent("t2", "Rainy.", "final_answer")]


@pytest.mark.parametrize(("items", "turn_id", "want"), [
    (TURN1, None, "  Sunny.\n\n"),  # exactly as printed
    (TURN1 + TURN2, None, "Rainy."),  # the last Turn with an answer
    (TURN1 + TURN2, "t1", "  Sunny.\n\n"),
    (TURN1 + TURN2, "t3", None),
    ([USER, agent("t1", "Let me look.", "commentary"), CALL], None, None),  # no answer yet
    ([], None, None),
])
def test_final_answer(items: list[dict[str, Any]], turn_id: str | None, want: str | None
                      ) -> None:
    assert final_answer(items, turn_id) == want


def test_agent_messages_and_answers_by_turn() -> None:
    assert [agent_text(m) for m in agent_messages(TURN1 + TURN2)] == [
        "Let me look.", "  Sunny.\n\n", "Rainy."]
    assert [agent_text(m) for m in agent_messages(TURN1 + TURN2, "t2")] == ["Rainy."]
    assert final_answers(TURN1 + TURN2) == {"t1": "  Sunny.\n\n", "t2": "Rainy."}



def test_both_faces_offer_the_helpers() -> None:
    from session_core_client import AsyncClient, Client

    for face in (Client("http://x"), AsyncClient("http://x")):
        assert face.final_answer(TURN1) == "  Sunny.\n\n"
        assert face.final_answers(TURN1 + TURN2) == {"t1": "  Sunny.\n\n", "t2": "Rainy."}
        assert len(face.agent_messages(TURN1)) == 2

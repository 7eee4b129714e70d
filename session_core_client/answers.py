"""What the agent said, picked out of Items (CONTRACT §2, "Public Items"): pure functions over the
Item dicts any call returns — a ``wait=True`` answer's ``items``, ``items()``, ``stream_items()``
or records read from ``session.items`` — so the sync and the async client use the same ones
(``Client.final_answer`` / ``AsyncClient.final_answer`` are these functions).

An agent message Item is ``{"type": "message", "role": "agent", "turn_id", "content":
[{"type": "output_text", "text"}], "phase": "commentary" | "final_answer", "phase_source"}``;
the text is exactly what the harness printed (never trimmed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Item = Mapping[str, Any]


def is_agent_message(item: Item) -> bool:
    return item.get("type") == "message" and item.get("role") == "agent"


def agent_text(item: Item) -> str:
    """The text of an agent message Item (its ``output_text`` parts, in order)."""
    return "".join(str(p.get("text", "")) for p in item.get("content") or ()
                   if isinstance(p, Mapping) and p.get("type") == "output_text")


def agent_messages(items: Iterable[Item], turn_id: str | None = None) -> list[Item]:
    """The agent message Items among ``items`` (of one Turn when ``turn_id`` is given), in
    the order given (``sequence`` order for every read of the API)."""
    return [i for i in items if is_agent_message(i)
            and (turn_id is None or i.get("turn_id") == turn_id)]


def final_answers(items: Iterable[Item]) -> dict[str, str]:
    """Each Turn's final answer among ``items``: ``turn_id`` → its text."""
    return {str(i.get("turn_id")): agent_text(i) for i in agent_messages(items)
            if i.get("phase") == "final_answer"}


def final_answer(items: Iterable[Item], turn_id: str | None = None) -> str | None:
    """The final answer's text: of ``turn_id``, else of the last Turn among ``items`` that has
    one; ``None`` when there is none (the Turn is still running, it failed before answering,
    or its last message came before a function call)."""
    answers = final_answers(items)
    if turn_id is not None:
        return answers.get(turn_id)
    return list(answers.values())[-1] if answers else None


__all__ = ["agent_messages", "agent_text", "final_answer", "final_answers", "is_agent_message"]

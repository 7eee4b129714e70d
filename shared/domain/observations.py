"""Classify native observations (CONTRACT §2) into the facts storage turns into Items: a
function call the harness made, and the end of a native Turn. Confirmation of function results
is the receipt tracker's business (``shared.domain.receipts``), not this module's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.domain.adapters.claude import public_name


@dataclass(frozen=True)
class CallOpened:
    call_id: str
    name: str
    arguments: Any
    native_ids: dict[str, Any]


@dataclass(frozen=True)
class TurnEnded:
    state: str  # completed | failed
    native_turn_id: str | None


Classified = CallOpened | TurnEnded | None


def classify_all(harness: str, native: Any) -> list[CallOpened | TurnEnded]:
    """Every fact one native record carries: a Claude assistant record may hold several
    parallel ``tool_use`` blocks, each one call."""
    if (
        harness == "claude_code"
        and isinstance(native, dict)
        and native.get("type") == "assistant"
        and native.get("parent_tool_use_id") is None
    ):
        msg = native.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        out: list[CallOpened | TurnEnded] = []
        for block in content if isinstance(content, list) else []:
            if (isinstance(block, dict) and block.get("type") == "tool_use"
                    and isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                    and (name := public_name(block["name"])) is not None):
                # The real binary names a public function mcp__core__<name>; built-ins
                # (Agent/Task…) are not public calls (docs/runtime-boundary.md).
                out.append(CallOpened(call_id=block["id"], name=name,
                                      arguments=block.get("input"),
                                      native_ids={"session_id": native.get("session_id")}))
        return out
    c = _single(harness, native)
    return [] if c is None else [c]


def classify(harness: str, native: Any) -> Classified:
    """The first fact a native record carries (``classify_all`` gives every one)."""
    facts = classify_all(harness, native)
    return facts[0] if facts else None


def _single(harness: str, native: Any) -> Classified:
    """The fact of a record that carries at most one: everything but a Claude assistant
    record's calls."""
    if not isinstance(native, dict):
        return None
    if harness == "codex":
        method = native.get("method")
        params = native.get("params")
        if not isinstance(params, dict):
            return None
        if method == "item/started":
            item = params.get("item")
            if isinstance(item, dict) and item.get("type") == "dynamicToolCall":
                if isinstance(item.get("id"), str) and isinstance(item.get("tool"), str):
                    return CallOpened(
                        call_id=item["id"],
                        name=item["tool"],
                        arguments=item.get("arguments"),
                        native_ids={"thread_id": params.get("threadId"),
                                    "turn_id": params.get("turnId")},
                    )
        if method == "turn/completed":
            # The real app-server (0.169) prints ``params.turn`` ``{id, status: completed |
            # interrupted | failed, error}``; the simulation's flat ``turnId`` / ``status`` is
            # still read. Anything but ``completed`` ends the Turn failed.
            turn = params.get("turn")
            if isinstance(turn, dict):
                status, turn_id = turn.get("status"), turn.get("id")
            else:
                status, turn_id = params.get("status"), params.get("turnId")
            return TurnEnded("completed" if status == "completed" else "failed",
                             turn_id if isinstance(turn_id, str) else None)
        return None
    # Claude Code's Turn end; MiniMax Code's bridge reports Turn ends the same way.
    if harness in ("claude_code", "minimax_code") and native.get("type") == "result":
        sub = native.get("subtype")
        return TurnEnded("completed" if sub == "success" else "failed", None)
    return None

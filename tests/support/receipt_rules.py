"""The seed's rules for an application receipt and a Turn's end, written again for the chaos
checker — independently of the product: nothing here imports the receipt tracker's matcher
(``shared.domain.receipts``, ``shared.domain.harnesses``) or its observation classifier, so a
matcher that is too lenient cannot pass the product and this check alike.
``tests/unit/test_receipt_rules.py`` holds these rules against the recorded goldens
(``tests/data/native/{codex,claude_code}``).

Seed 000, "Function results":

- *Codex confirms with the live root dynamic-tool ``item/completed`` observation that matches
  thread, Turn, call, function name, status, success flag and the exact ordered content.*
  Here: ``method`` ``item/completed``, ``params.item.type`` ``dynamicToolCall``,
  ``params.threadId`` / ``params.turnId`` those the call was announced with (its
  ``item/started`` or ``item/tool/call``), ``item.id`` the call id, ``item.tool`` the name,
  ``item.status`` ``completed`` for a success else ``failed``, ``item.success`` the flag (a
  bool), ``item.contentItems`` the delivered parts in order (``inputText`` ``text`` /
  ``inputImage`` ``imageUrl``, equal strings). The record Codex prints when it gives up an
  unanswered call (``failed``, ``success: false``, no content) is never a confirmation.
- *Claude Code confirms with a live root native tool result that matches the Session, call ID,
  success flag, exact text, block count and order, with a native image at every image
  position. Replayed, synthetic and Subagent records do not confirm it.* Here: a ``user``
  record without ``isReplay`` / ``isSynthetic`` true, ``parent_tool_use_id`` null, the native
  ``session_id`` the call was announced in, exactly one ``tool_result`` block for the call,
  ``is_error`` (absent: false) = not success, and content blocks in count and order: ``text``
  with the exact text, ``image`` at each image position. Claude Code 2.1.328 prints a failed
  result's text blocks joined by ``"\\n"`` as one string (docs/receipts.md): for a failed result
  that string must equal the delivered texts joined so.

A record the Runtime made up (``"synthesized": true``: the harness never printed it) is never a
receipt. A Turn's end: Codex ``turn/completed`` (``turn.status`` ``completed``, else failed;
the reference Runtime's simulation prints the status flat in ``params``),
Claude Code ``result`` (``subtype`` ``success`` and not ``is_error``, else failed) — unless the
Runtime forwarded it with ``native_turn_continues`` (a queued steer runs on in that Turn)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Json = dict[str, Any]
CLAUDE_TOOL_PREFIX = "mcp__core__"  # Core's public functions as Claude Code's MCP tools


@dataclass(frozen=True)
class Announced:
    """A call as the harness announced it: the native ids its receipt must carry."""
    harness: str
    call_id: str
    name: str
    thread_id: str | None = None  # codex
    turn_id: str | None = None  # codex
    native_session_id: str | None = None  # claude_code


def announced(harness: str, natives: Iterable[Mapping[str, Any]],
              call_ids: set[str] | None = None) -> dict[str, Announced]:
    """Each call's first announcement among the harness's records (call id → ``Announced``);
    with ``call_ids`` (the Session's ``function_call`` Items), only those calls — Core's calls
    are public functions, whatever else the harness calls is not."""
    out: dict[str, Announced] = {}
    for n in natives:
        for a in _announcements(harness, n):
            if call_ids is None or a.call_id in call_ids:
                out.setdefault(a.call_id, a)
    return out


def _announcements(harness: str, n: Mapping[str, Any]) -> list[Announced]:
    if n.get("synthesized") is True:
        return []
    if harness == "codex":
        p = n.get("params")
        if not isinstance(p, Mapping):
            return []
        if n.get("method") == "item/started":
            item = p.get("item")
            if isinstance(item, Mapping) and item.get("type") == "dynamicToolCall":
                return [Announced("codex", str(item.get("id")), str(item.get("tool")),
                                  thread_id=p.get("threadId"), turn_id=p.get("turnId"))]
        if n.get("method") == "item/tool/call" and isinstance(p.get("callId"), str):
            return [Announced("codex", p["callId"], str(p.get("tool")),
                              thread_id=p.get("threadId"), turn_id=p.get("turnId"))]
        return []
    if harness == "claude_code":
        if (n.get("type") != "assistant" or n.get("parent_tool_use_id") is not None
                or n.get("isReplay") is True):
            return []
        msg = n.get("message")
        blocks = msg.get("content") if isinstance(msg, Mapping) else None
        out = []
        for b in blocks if isinstance(blocks, list) else []:
            name = b.get("name") if isinstance(b, Mapping) else None
            if b.get("type") == "tool_use" and isinstance(name, str):
                # the real binary names a public function mcp__core__<name>; the reference
                # Runtime's simulation prints the bare name
                if name.startswith(CLAUDE_TOOL_PREFIX):
                    name = name[len(CLAUDE_TOOL_PREFIX):]
                out.append(Announced("claude_code", str(b.get("id")), name,
                                     native_session_id=n.get("session_id")))
        return out
    return []


def confirms(call: Announced, success: bool, content: Sequence[Mapping[str, Any]],
             native: Mapping[str, Any]) -> bool:
    """Whether ``native`` (one record the harness printed) is the receipt of the result
    ``success`` / ``content`` (the delivered parts: ``input_text`` / ``input_image``) for
    ``call``."""
    if native.get("synthesized") is True:
        return False
    if call.harness == "codex":
        return _codex_confirms(call, success, content, native)
    if call.harness == "claude_code":
        return _claude_confirms(call, success, content, native)
    return False


def _codex_confirms(call: Announced, success: bool, content: Sequence[Mapping[str, Any]],
                    n: Mapping[str, Any]) -> bool:
    p = n.get("params")
    if n.get("method") != "item/completed" or not isinstance(p, Mapping):
        return False
    item = p.get("item")
    if not isinstance(item, Mapping) or item.get("type") != "dynamicToolCall":
        return False
    if call.thread_id is None or call.turn_id is None:
        return False
    if (p.get("threadId"), p.get("turnId"), item.get("id"), item.get("tool")) != (
            call.thread_id, call.turn_id, call.call_id, call.name):
        return False
    got = item.get("contentItems")
    if item.get("status") == "failed" and item.get("success") is False and not got:
        return False  # what Codex prints for a call it gave up: a release, never a receipt
    if item.get("status") != ("completed" if success else "failed"):
        return False
    if item.get("success") is not success:  # a bool, and the flag
        return False
    want = [{"type": "inputImage", "imageUrl": c.get("image_url")}
            if c.get("type") == "input_image" else {"type": "inputText", "text": c.get("text")}
            for c in content]
    if not isinstance(got, list) or len(got) != len(want):
        return False
    for w, g in zip(want, got, strict=True):
        if not isinstance(g, Mapping) or {k: g.get(k) for k in w} != w:
            return False
    return True


def _claude_confirms(call: Announced, success: bool, content: Sequence[Mapping[str, Any]],
                     n: Mapping[str, Any]) -> bool:
    if n.get("type") != "user" or n.get("isReplay") is True or n.get("isSynthetic") is True:
        return False
    if n.get("parent_tool_use_id") is not None:
        return False  # a Subagent's record
    if call.native_session_id is None or n.get("session_id") != call.native_session_id:
        return False
    msg = n.get("message")
    blocks = msg.get("content") if isinstance(msg, Mapping) else None
    if not isinstance(blocks, list):
        return False
    mine = [b for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_result"
            and b.get("tool_use_id") == call.call_id]
    if len(mine) != 1:
        return False
    block = mine[0]
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool) or is_error is success:
        return False
    got = block.get("content")
    texts = [c.get("text") for c in content if c.get("type") == "input_text"]
    if isinstance(got, str):
        # a failed result as the binary prints it: its text blocks joined by "\n"
        return (not success and len(texts) == len(content)
                and got == "\n".join(str(t) for t in texts))
    if not isinstance(got, list) or len(got) != len(content):
        return False
    for c, g in zip(content, got, strict=True):
        if not isinstance(g, Mapping):
            return False
        if c.get("type") == "input_image":
            if g.get("type") != "image":
                return False
        elif g.get("type") != "text" or g.get("text") != c.get("text"):
            return False
    return True


def receipts(call: Announced, success: bool, content: Sequence[Mapping[str, Any]],
             natives: Iterable[Mapping[str, Any]]) -> int:
    """How many distinct records the harness printed that confirm the result: 1 = applied
    once, 2 or more = applied twice. The same record reported twice (the same JSON) counts
    once."""
    seen = {json.dumps(n, sort_keys=True) for n in natives if confirms(call, success, content, n)}
    return len(seen)


def turn_end(harness: str, observation: Mapping[str, Any]) -> str | None:
    """``completed`` / ``failed`` when the observation is the end of its Turn as the harness
    (or, for a dead harness, the Runtime: ``synthesized``) reported it, else None."""
    if observation.get("native_turn_continues") is True:
        return None
    n = observation.get("native")
    if not isinstance(n, Mapping):
        return None
    if harness == "codex" and n.get("method") == "turn/completed":
        p = n.get("params")
        if not isinstance(p, Mapping):
            return "failed"
        turn = p.get("turn")
        # the real app-server prints params.turn.status; the reference Runtime's simulation
        # a flat params.status
        status = turn.get("status") if isinstance(turn, Mapping) else p.get("status")
        return "completed" if status == "completed" else "failed"
    if harness == "claude_code" and n.get("type") == "result":
        ok = n.get("subtype") == "success" and n.get("is_error") is not True
        return "completed" if ok else "failed"
    return None

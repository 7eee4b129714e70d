"""What the harness's root agent said, and the tokens it reported, read from native observations
(CONTRACT §2, "Public Items": agent ``message`` Items and a Turn end's ``usage``).

Pure: one native record in, the ``AgentSaid`` / ``UsageReported`` it carries out (a list, in the
order the harness printed them). Storage turns them into facts keyed by ``key`` — the native
item's identity — so a redelivered or re-read observation decides nothing new
(``services/storage/handler.py``); the phase of a message the harness gave none is derived by
the Session state machine (``services.storage.domain.sessions``), which sees what follows it.

Sources:

* Codex (``codex app-server``): ``item/completed`` whose ``item`` is an ``agentMessage`` — its
  ``text`` as printed, its ``phase`` when ``commentary`` or ``final_answer`` (``partial_answer``
  and ``null`` give none: derived); ``thread/tokenUsage/updated``'s ``tokenUsage.last`` (the
  usage of one model response; a Turn's usage is the sum over its responses). Only records of
  the Session's root thread count: a Runtime that knows it names it in the envelope
  (``root_thread_id``), and records of any other thread (a subagent's) are ignored.
* Claude Code: every ``text`` block of a live root ``assistant`` record (``isReplay`` /
  ``isSynthetic`` absent or ``false``, ``parent_tool_use_id`` null — ``claude_code.is_live_root``
  — and not the harness's own ``<synthetic>`` model message), one message per block;
  ``result``'s ``usage`` (the usage of one native command; a Turn of several commands — a
  steer queued behind the first — sums them). ``cached_input_tokens`` is Claude Code's
  ``cache_read_input_tokens``; ``input_tokens`` stays as reported (Anthropic's count excludes
  cached tokens, OpenAI's includes them: docs/client.md, "The Turn's answer", ``usage``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from shared.domain.harnesses import claude_code

PROVIDER_PHASES = frozenset({"commentary", "final_answer"})
SYNTHETIC_MODEL = "<synthetic>"  # Claude Code's own assistant messages (API errors and the like)
USAGE_FIELDS = ("input_tokens", "output_tokens", "cached_input_tokens")


@dataclass(frozen=True)
class AgentSaid:
    key: str  # the native item's identity within the Session
    text: str  # exactly as printed
    phase: str | None  # the harness's own phase (commentary | final_answer), else None


@dataclass(frozen=True)
class UsageReported:
    key: str
    usage: dict[str, int]  # input_tokens, output_tokens, cached_input_tokens


Said = AgentSaid | UsageReported


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _codex(native: Mapping[str, Any], root_thread_id: str | None) -> list[Said]:
    params = native.get("params")
    if not isinstance(params, Mapping):
        return []
    thread = params.get("threadId")
    if root_thread_id is not None and thread != root_thread_id:
        return []  # another thread: a subagent's
    method = native.get("method")
    if method == "item/completed":
        item = params.get("item")
        if not (isinstance(item, Mapping) and item.get("type") == "agentMessage"
                and isinstance(item.get("text"), str) and isinstance(item.get("id"), str)):
            return []
        phase = item.get("phase")
        return [AgentSaid(f"codex:{thread}:{params.get('turnId')}:{item['id']}", item["text"],
                          phase if phase in PROVIDER_PHASES else None)]
    if method == "thread/tokenUsage/updated":
        usage = params.get("tokenUsage")
        last = usage.get("last") if isinstance(usage, Mapping) else None
        total = usage.get("total") if isinstance(usage, Mapping) else None
        if not isinstance(last, Mapping):
            return []
        # the running total identifies the report: it grows with every response
        seen = total.get("totalTokens") if isinstance(total, Mapping) else None
        return [UsageReported(f"codex:{thread}:{params.get('turnId')}:{seen}", {
            "input_tokens": _count(last.get("inputTokens")),
            "output_tokens": _count(last.get("outputTokens")),
            "cached_input_tokens": _count(last.get("cachedInputTokens")),
        })]
    return []


def _claude(native: Mapping[str, Any], fallback_id: str | None) -> list[Said]:
    kind = native.get("type")
    if kind not in ("assistant", "result") or not claude_code.is_live_root(native):
        return []
    record_id = native.get("uuid") if isinstance(native.get("uuid"), str) else fallback_id
    if record_id is None:
        return []
    if kind == "result":
        usage = native.get("usage")
        if not isinstance(usage, Mapping):
            return []
        return [UsageReported(f"claude:{record_id}", {
            "input_tokens": _count(usage.get("input_tokens")),
            "output_tokens": _count(usage.get("output_tokens")),
            "cached_input_tokens": _count(usage.get("cache_read_input_tokens")),
        })]
    message = native.get("message")
    if not isinstance(message, Mapping) or message.get("model") == SYNTHETIC_MODEL:
        return []
    blocks = message.get("content")
    if not isinstance(blocks, list):
        return []
    return [AgentSaid(f"claude:{record_id}:{i}", b["text"], None)
            for i, b in enumerate(blocks)
            if isinstance(b, Mapping) and b.get("type") == "text"
            and isinstance(b.get("text"), str)]


def said_all(harness: str, native: Any, *, root_thread_id: str | None = None,
             fallback_id: str | None = None) -> list[Said]:
    """Every agent message and usage report one native record carries, in printed order.
    ``root_thread_id``: the Codex thread the Session runs in, when the Runtime named it.
    ``fallback_id``: the record's identity when the harness printed none (the observation's
    id; a Claude Code record always carries its ``uuid``)."""
    if not isinstance(native, Mapping):
        return []
    if harness == "codex":
        return _codex(native, root_thread_id)
    if harness == "claude_code":
        return _claude(native, fallback_id)
    return []


def add_usage(total: Mapping[str, int] | None, more: Mapping[str, int]) -> dict[str, int]:
    """Two usage reports summed field by field (``None``: nothing reported yet)."""
    return {k: (total or {}).get(k, 0) + more.get(k, 0) for k in USAGE_FIELDS}

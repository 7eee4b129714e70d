"""Codex: native encoding (app-server protocol v2) and observation classification.

Messages: a batch of public messages flattens into one native ``UserInput`` list. Every public
part maps to exactly one native item, in order — ``input_text`` → ``{"type": "text", "text"}``,
``input_image`` → ``{"type": "image", "url": <the data URI unchanged>}`` — and between two
consecutive public messages one separator item ``{"type": "text", "text": "\\n\\n"}`` is
inserted. Nothing is merged, trimmed or dropped: a whitespace-only or empty text part is
delivered unchanged, and a message boundary next to an image is still marked. The native
history does not keep public message boundaries; Core's storage does.

Function results: ``contentItems`` — ``{"type": "inputText", "text"}`` /
``{"type": "inputImage", "imageUrl"}`` in the delivered order; the same encoding is used by a
Runtime to answer ``item/tool/call`` and by the receipt tracker to match ``item/completed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.domain.errors import join_path
from shared.domain.harnesses.errors import AdapterError, UnsupportedContent
from shared.domain.harnesses.facts import CallOpened, Fact, TurnEnded
from shared.domain.receipt_types import (
    CONFIRMED,
    RELEASED,
    Expected,
    NotAMatch,
    Verdict,
    differs,
    digest,
    is_bool,
    released,
)

HARNESS = "codex"
MESSAGE_SEPARATOR = "\n\n"

NativeItem = dict[str, Any]


def _native_input(part: Mapping[str, Any], param: str) -> NativeItem | AdapterError:
    kind = part.get("type")
    if kind == "input_text":
        return {"type": "text", "text": part["text"]}
    if kind == "input_image":
        return {"type": "image", "url": part["image_url"]}
    return UnsupportedContent(message=f"unknown content part type {kind!r}", param=param)


def flatten_messages(messages: Sequence[Mapping[str, Any]]) -> list[NativeItem] | AdapterError:
    """A batch of public messages → the Codex native input list (``turn/start`` /
    ``turn/steer`` ``input``)."""
    native: list[NativeItem] = []
    for i, message in enumerate(messages):
        if i > 0:
            native.append({"type": "text", "text": MESSAGE_SEPARATOR})
        for j, part in enumerate(message["content"]):
            item = _native_input(part, join_path(join_path(join_path("messages", i), "content"), j))
            if isinstance(item, AdapterError):
                return item
            native.append(item)
    return native


def content_items(content: Iterable[Mapping[str, Any]]) -> list[NativeItem] | AdapterError:
    """A delivered function-result content list → Codex ``contentItems``."""
    items: list[NativeItem] = []
    for j, part in enumerate(content):
        kind = part.get("type")
        if kind == "input_text":
            items.append({"type": "inputText", "text": part["text"]})
        elif kind == "input_image":
            items.append({"type": "inputImage", "imageUrl": part["image_url"]})
        else:
            return UnsupportedContent(
                message=f"unknown content part type {kind!r}", param=join_path("content", j)
            )
    return items


def function_result_response(
    success: bool, content: Iterable[Mapping[str, Any]]
) -> dict[str, Any] | AdapterError:
    """The ``DynamicToolCallResponse`` a Runtime answers ``item/tool/call`` with."""
    items = content_items(content)
    if isinstance(items, AdapterError):
        return items
    return {"contentItems": items, "success": success}


def expected_status(success: bool) -> str:
    """The ``item/completed`` status Codex records: ``completed`` when the result succeeded,
    ``failed`` otherwise (Codex app-server sets it from the response's ``success``)."""
    return "completed" if success else "failed"


def steer_error_ends_turn(error: object, expected_turn_id: str) -> bool:
    """Whether a ``turn/steer`` error says the Turn the steer was for has ended. The real
    app-server (0.169) answers every steer error with code -32600; only two of its messages mean
    that: "no active turn to steer", and "expected active turn id `<ours>` but found `<another>`"
    (another Turn runs now). Any other error — empty or malformed input, an unknown thread, a
    compact turn that cannot be steered, "Server overloaded" (-32001) — leaves it running."""
    message = error.get("message") if isinstance(error, Mapping) else None
    if not isinstance(message, str):
        return False
    return (message == "no active turn to steer"
            or message.startswith(f"expected active turn id `{expected_turn_id}` but found"))


@dataclass(frozen=True, slots=True)
class CodexCall:
    thread_id: str
    turn_id: str
    call_id: str
    name: str
    arguments: Any


def function_call(native: Mapping[str, Any]) -> CodexCall | None:
    """The dynamic-tool call announced by an ``item/started`` observation, else ``None``."""
    if native.get("method") != "item/started":
        return None
    params = native.get("params")
    if not isinstance(params, Mapping):
        return None
    item = params.get("item")
    if not isinstance(item, Mapping) or item.get("type") != "dynamicToolCall":
        return None
    thread_id, turn_id = params.get("threadId"), params.get("turnId")
    call_id, name = item.get("id"), item.get("tool")
    if not all(isinstance(v, str) for v in (thread_id, turn_id, call_id, name)):
        return None
    return CodexCall(str(thread_id), str(turn_id), str(call_id), str(name), item.get("arguments"))


def classify_all(native: Mapping[str, Any]) -> list[Fact]:
    """The fact a Codex record carries: a dynamic-tool call (``item/started``) or the Turn's
    end (``turn/completed``)."""
    method = native.get("method")
    params = native.get("params")
    if not isinstance(params, dict):
        return []
    if method == "item/started":
        item = params.get("item")
        if isinstance(item, dict) and item.get("type") == "dynamicToolCall":
            if isinstance(item.get("id"), str) and isinstance(item.get("tool"), str):
                return [CallOpened(
                    call_id=item["id"],
                    name=item["tool"],
                    arguments=item.get("arguments"),
                    native_ids={"thread_id": params.get("threadId"),
                                "turn_id": params.get("turnId")},
                )]
    if method == "turn/completed":
        # The real app-server (0.169) prints ``params.turn`` ``{id, status: completed |
        # interrupted | failed, error}``; the simulation's flat ``turnId`` / ``status`` is
        # still read. Anything but ``completed`` ends the Turn failed.
        turn = params.get("turn")
        if isinstance(turn, dict):
            status, turn_id = turn.get("status"), turn.get("id")
        else:
            status, turn_id = params.get("status"), params.get("turnId")
        return [TurnEnded("completed" if status == "completed" else "failed",
                          turn_id if isinstance(turn_id, str) else None)]
    return []


# --------------------------------------------------------------------------- receipts


def receipt_call_ids(native: Mapping[str, Any]) -> tuple[str, ...]:
    """The calls a record could decide (confirm or release): a dynamic-tool call's
    ``item/completed`` or an ``item/released``. Every other record — the completion of an agent
    message, of reasoning, of a command — decides none."""
    params = native.get("params")
    if not isinstance(params, Mapping):
        return ()
    method = native.get("method")
    if method == "item/released":
        cid = params.get("callId")
        return (cid,) if isinstance(cid, str) else ()
    if method != "item/completed":
        return ()
    item = params.get("item")
    if not isinstance(item, Mapping) or item.get("type") != "dynamicToolCall":
        return ()
    cid = item.get("id")
    return (cid,) if isinstance(cid, str) else ()


def is_release(item: Mapping[str, Any]) -> bool:
    """A ``dynamicToolCall`` item as the real app-server prints it when the Turn ends with the
    call unanswered (golden ``unanswered.jsonl``): failed, ``success: false``, no content."""
    return (item.get("status") == "failed" and item.get("success") is False
            and item.get("contentItems") == [])


def match_receipt(expected: Expected, native: Mapping[str, Any]) -> Verdict:
    """The receipt matcher (``shared.domain.receipts.match_native`` dispatches here).

    Codex confirms with ``item/completed`` for a ``dynamicToolCall`` whose ``threadId`` and
    ``turnId`` are those of the call's ``item/started``, whose ``id`` / ``tool`` are the call id
    and function name, whose ``status`` is ``completed`` when the result succeeded else
    ``failed``, whose ``success`` is the result's flag, and whose ``contentItems`` equal the
    delivered content's Codex encoding item for item (text equal, ``imageUrl`` equal). Codex
    releases a call with the same record: when the Turn ends (interrupted) with the call
    unanswered, the real app-server prints that call's ``item/completed`` with ``status:
    "failed"``, ``success: false`` and ``contentItems: []`` (there is no ``item/released`` in
    0.169): that record is a release (``is_release``) whatever was delivered — also for a bare
    failed result (delivered as ``[]``), whose application Codex records with the very same
    record: a record that may be a release never confirms. The Runtime also reports
    ``item/released`` (marked ``synthesized``) for calls of a harness process that died.
    """
    method = native.get("method")
    params = native.get("params")
    if not isinstance(params, Mapping):
        return NotAMatch("params", "params: not an object")
    if method == "item/released":
        return released(params, (("threadId", expected.thread_id),
                                 ("turnId", expected.turn_id), ("callId", expected.call_id)))
    if method != "item/completed":
        return differs("method", "item/completed", method)
    item = params.get("item")
    if not isinstance(item, Mapping):
        return NotAMatch("item", "item: not an object")
    if item.get("type") != "dynamicToolCall":
        return differs("item.type", "dynamicToolCall", item.get("type"))
    if expected.thread_id is None or params.get("threadId") != expected.thread_id:
        return differs("threadId", expected.thread_id, params.get("threadId"))
    if expected.turn_id is None or params.get("turnId") != expected.turn_id:
        return differs("turnId", expected.turn_id, params.get("turnId"))
    if item.get("id") != expected.call_id:
        return differs("item.id", expected.call_id, item.get("id"))
    if item.get("tool") != expected.name:
        return differs("item.tool", expected.name, item.get("tool"))
    got = item.get("contentItems")
    if is_release(item):
        return RELEASED
    status = expected_status(expected.success)
    if item.get("status") != status:
        return differs("item.status", status, item.get("status"))
    if not is_bool(item.get("success"), expected.success):
        return differs("item.success", expected.success, item.get("success"))
    if not isinstance(got, list):
        return NotAMatch("contentItems", "contentItems: not a list")
    if len(got) != len(expected.content):
        return differs("contentItems.count", len(expected.content), len(got))
    for i, ((kind, key), g) in enumerate(zip(expected.content, got, strict=True)):
        wtype, field = ("inputImage", "imageUrl") if kind == "image" else ("inputText", "text")
        gtype = g.get("type") if isinstance(g, Mapping) else None
        if gtype != wtype:
            return differs(f"contentItems[{i}].type", wtype, gtype)
        assert isinstance(g, Mapping)
        value = g.get(field)
        if not isinstance(value, str) or digest(value) != key:
            return NotAMatch(
                f"contentItems[{i}].{field}",
                f"contentItems[{i}].{field}: differs, got {value!r:.80}",
            )
    return CONFIRMED

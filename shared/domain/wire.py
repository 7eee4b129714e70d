"""What the Runtime receives: the Core–Runtime wire's content (CONTRACT §2 "Deliveries").

Pure functions. Nothing here mutates its input: every part handed back is a new ``dict``, so a
caller may serialise, encode or even edit the result without touching the stored submission.

* ``result_content`` — a function result travels as one ordered content list: the ``output``
  parts (a string output is one text part; a null or absent output contributes nothing), then
  the ``error`` text as a final text part (when ``error`` is a string). Empty strings are
  strings: ``output=""`` is one empty text part and ``error=""`` one empty final text part —
  Core never trims and never drops (docs/runtime-boundary.md).
* ``message_input`` / ``message_delivery`` / ``function_result_delivery`` /
  ``interrupt_delivery`` — the ``runtime.delivery/1`` records the dispatcher publishes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, Literal

from shared.messages import schemas

# An InputContent part: {"type": "input_text", "text"} or {"type": "input_image", "image_url"}.
InputContent = dict[str, Any]
# A MessageInput on the wire: {"role": "user", "content": [InputContent…]}.
MessageInput = dict[str, Any]

DeliveryKind = Literal["start", "steer", "function_result", "interrupt"]
DELIVERY_SCHEMA = schemas.DELIVERY

INPUT_TEXT = "input_text"
INPUT_IMAGE = "input_image"

# The refusal code of a Runtime that got a ``steer`` for a native Turn it has already ended (the
# harness ended it while Core's stored view still had it running). Core then hands the steered
# messages over again: into the Turn running by then, or as the start of a new Turn
# (docs/runtime-boundary.md, "A steer that arrives after the Turn ended").
REFUSAL_TURN_ENDED = "turn_ended"

# The refusal code of a Claude Code bridge that got a ``steer`` which would take its native Turn
# past the per-Turn user-message bound: it submitted no part of the batch and ends the running
# native Turn; Core's Turn ends ``failed`` from that observed end (docs/runtime-boundary.md,
# "The 64-message bound: the bridge refuses and ends the native Turn").
REFUSAL_TURN_BOUND_EXCEEDED = "turn_message_bound_exceeded"


def delivery_id(event_id: str) -> str:
    """The first delivery of an input: ``dlv_`` + the hex of its ``evt_`` id."""
    return f"dlv_{event_id.removeprefix('evt_')}"


def interrupt_delivery_id(event_id: str) -> str:
    """The ``interrupt`` sent when the input ``event_id`` fails the Turn its Runtime runs:
    ``int_`` + the hex of its ``evt_`` id (one per input, so a redelivered input sends the same
    id, which the Runtime drops as a duplicate)."""
    return f"int_{event_id.removeprefix('evt_')}"


def next_delivery_id(refused: str) -> str:
    """A new id for handing the input of ``refused`` over again (a Runtime drops a repeated
    ``delivery_id`` as a duplicate): ``dlv_x`` → ``dlv_x_r1`` → ``dlv_x_r2`` …"""
    base, _, n = refused.partition("_r")
    return f"{base}_r{int(n) + 1 if n.isdigit() else 1}"


def event_of_delivery(did: str) -> str | None:
    """The ``evt_`` id a message delivery id was made from (None for another shape)."""
    if not did.startswith("dlv_"):
        return None
    hexpart = did.removeprefix("dlv_").partition("_r")[0]
    return f"evt_{hexpart}" if hexpart else None


def text_part(text: str) -> InputContent:
    return {"type": INPUT_TEXT, "text": text}


def copy_part(part: Mapping[str, Any]) -> InputContent:
    """A new part with exactly the fields the wire carries for its type.

    Unknown part types are copied whole (validation is admission's job, and this module must
    never silently strip anything it does not understand)."""
    kind = part.get("type")
    if kind == INPUT_TEXT:
        return {"type": INPUT_TEXT, "text": part["text"]}
    if kind == INPUT_IMAGE:
        return {"type": INPUT_IMAGE, "image_url": part["image_url"]}
    return dict(part)


def copy_content(content: Iterable[Mapping[str, Any]]) -> list[InputContent]:
    return [copy_part(p) for p in content]


def result_content(
    output: str | Sequence[Mapping[str, Any]] | None,
    error: str | None,
    fields_present: Collection[str] | None = None,
) -> list[InputContent]:
    """The ordered content list a function result is delivered as.

    ``fields_present`` is the stored submission's record of which of ``output`` / ``error``
    were present; a field absent from it contributes nothing whatever value is passed. ``None``
    means "infer from the values" (a non-null value is present)."""

    def present(name: str, value: object) -> bool:
        if value is None:
            return False
        return fields_present is None or name in fields_present

    content: list[InputContent] = []
    if present("output", output):
        if isinstance(output, str):
            content.append(text_part(output))
        else:
            assert output is not None
            content.extend(copy_content(output))
    if present("error", error):
        assert error is not None
        content.append(text_part(error))
    return content


def has_images(content: Iterable[Mapping[str, Any]]) -> bool:
    return any(p.get("type") == INPUT_IMAGE for p in content)


def messages_have_images(messages: Iterable[Mapping[str, Any]]) -> bool:
    return any(has_images(m.get("content", ())) for m in messages)


def message_input(message: Mapping[str, Any]) -> MessageInput:
    """A stored public message as the wire's MessageInput: role and ordered parts, copied."""
    return {"role": "user", "content": copy_content(message["content"])}


def _head(delivery_id: str, runtime_id: str, session_id: str, turn_id: str, kind: str
          ) -> dict[str, Any]:
    """What every ``runtime.delivery/1`` record starts with (key order as on the topic)."""
    return {
        "schema": DELIVERY_SCHEMA,
        "delivery_id": delivery_id,
        "runtime_id": runtime_id,
        "session_id": session_id,
        "turn_id": turn_id,
        "kind": kind,
    }


def message_delivery(
    *,
    delivery_id: str,
    runtime_id: str,
    session_id: str,
    turn_id: str,
    kind: Literal["start", "steer"],
    messages: Iterable[Mapping[str, Any]],
) -> dict[str, Any]:
    return {
        **_head(delivery_id, runtime_id, session_id, turn_id, kind),
        "messages": [message_input(m) for m in messages],
    }


def function_result_delivery(
    *,
    delivery_id: str,
    runtime_id: str,
    session_id: str,
    turn_id: str,
    call_id: str,
    name: str,
    success: bool,
    output: str | Sequence[Mapping[str, Any]] | None,
    error: str | None,
    fields_present: Collection[str] | None = None,
) -> dict[str, Any]:
    return {
        **_head(delivery_id, runtime_id, session_id, turn_id, "function_result"),
        "call_id": call_id,
        "name": name,
        "success": success,
        "content": result_content(output, error, fields_present),
    }


def interrupt_delivery(
    *,
    delivery_id: str,
    runtime_id: str,
    session_id: str,
    turn_id: str,
    reason: str,
) -> dict[str, Any]:
    """Core failed ``turn_id``, which the Runtime is running: end the native Turn (Codex
    ``turn/interrupt``, Claude Code an ``interrupt`` control request) and forward its end.
    ``reason`` is why Core failed it (docs/runtime-boundary.md, "A Turn the dispatcher fails
    is interrupted at its Runtime")."""
    return {
        **_head(delivery_id, runtime_id, session_id, turn_id, "interrupt"),
        "reason": reason,
    }

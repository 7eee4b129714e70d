"""Step 1 of admission: the body's own fields, in the documented order — unknown fields first,
then field by field (``CREATE_FIELDS`` / ``MESSAGE_EVENT_FIELDS`` / ``TOOL_RESULT_FIELDS``):
harness and placement, the ids, ``stream``, ``success``, ``error``, and the envelope fields
every body may carry (``metadata``, ``tags``, ``external_actor``). Where the content's field
(``input``, ``output``) comes, its parts are walked by ``content`` so that the first malformed
field in that order is the one reported. Also the request-body size (413), which the entry
point checks on the bytes before parsing.

A reader returns the value the body would be admitted as, and what the content walk found for
the image and profile steps; or the first error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from services.admission.domain.validation import content
from services.admission.domain.validation.admitted import (
    EVENT_TYPES,
    MESSAGE_EVENT,
    NO_ENVELOPE,
    TOOL_RESULT_EVENT,
    AdmittedCreate,
    AdmittedMessageEvent,
    AdmittedToolResult,
    Envelope,
)
from services.admission.domain.validation.content import ContentWalk
from services.admission.domain.validation.limits import Limits
from services.admission.domain.validation.values import check_string, copy_json, type_name
from shared.domain.errors import ApiError, invalid, too_large
from shared.domain.harness import PLACEMENTS, HarnessProfile

CREATE_FIELDS = (
    "harness",
    "placement",
    "input",
    "stream",
    "client_request_id",
    "metadata",
    "tags",
    "external_actor",
)
COMMON_EVENT_FIELDS = ("client_event_id", "metadata", "tags", "external_actor")
MESSAGE_EVENT_FIELDS = ("type", "input", *COMMON_EVENT_FIELDS)
TOOL_RESULT_FIELDS = ("type", "call_id", "success", "output", "error", *COMMON_EVENT_FIELDS)
EXTERNAL_ACTOR_FIELDS = ("source", "actor_id", "actor_name", "metadata")
_ACTOR_PARAMS = {name: f"external_actor.{name}" for name in EXTERNAL_ACTOR_FIELDS}


def check_body_size(nbytes: int, limits: Limits) -> ApiError | None:
    """413 when a request body (HTTP body or ``session.input`` record value) is over the limit."""
    if nbytes > limits.max_body_bytes:
        return too_large(
            f"request body is {nbytes} bytes; the limit is {limits.max_body_bytes}", None
        )
    return None


# ---------------------------------------------------------------------------------------
# fields
# ---------------------------------------------------------------------------------------


def _unknown_top_level(body: dict[Any, Any], allowed: tuple[str, ...]) -> ApiError | None:
    for k in body:
        if k not in allowed:
            return invalid(f"unknown field {k!r}", k if isinstance(k, str) else None)
    return None


def _id_field(
    body: dict[str, Any], name: str, limits: Limits, required: bool
) -> str | ApiError | None:
    if name not in body or (body[name] is None and not required):
        if required:
            return invalid(f"{name} is required", name)
        return None
    value = body[name]
    if not isinstance(value, str) or not value:
        return invalid(f"{name} must be a non-empty string, got {type_name(value)}", name)
    if len(value) > limits.max_id_length:
        return invalid(f"{name} is longer than {limits.max_id_length} characters", name)
    return check_string(value, name) or value


def _metadata(raw: object, param: str, limits: Limits) -> dict[str, Any] | ApiError:
    """A metadata object: plain JSON (``copy_json``), at most ``max_metadata_keys`` top-level
    keys and ``max_metadata_bytes`` as compact UTF-8 JSON. Never interpreted."""
    if not isinstance(raw, dict):
        return invalid(f"{param} must be an object, got {type_name(raw)}", param)
    copied = copy_json(raw, param)
    if isinstance(copied, ApiError):
        return copied
    assert isinstance(copied, dict)
    if len(copied) > limits.max_metadata_keys:
        return invalid(f"{param} has more than {limits.max_metadata_keys} keys", param)
    size = len(json.dumps(copied, ensure_ascii=False, separators=(",", ":")).encode())
    if size > limits.max_metadata_bytes:
        return invalid(
            f"{param} is {size} bytes as JSON; the limit is {limits.max_metadata_bytes}", param
        )
    return copied


def _tags(raw: object, limits: Limits) -> list[str] | ApiError:
    if not isinstance(raw, list):
        return invalid(f"tags must be an array of strings, got {type_name(raw)}", "tags")
    if len(raw) > limits.max_tags:
        return invalid(f"more than {limits.max_tags} tags", f"tags[{limits.max_tags}]")
    for i, t in enumerate(raw):
        if not isinstance(t, str):
            return invalid(f"a tag must be a string, got {type_name(t)}", f"tags[{i}]")
        if len(t) > limits.max_tag_length:
            return invalid(f"a tag is longer than {limits.max_tag_length} characters", f"tags[{i}]")
        if not t.isascii():
            err = check_string(t, f"tags[{i}]")
            if err is not None:
                return err
    return list(raw)


def _external_actor(raw: object, limits: Limits) -> dict[str, Any] | ApiError:
    """``source`` and ``actor_id`` required non-empty strings, ``actor_name`` a string or null,
    ``metadata`` an object (same limits as top-level metadata) or null; no other keys."""
    p = "external_actor"
    if not isinstance(raw, dict):
        return invalid(f"external_actor must be an object, got {type_name(raw)}", p)
    for k in raw:
        if k not in EXTERNAL_ACTOR_FIELDS:
            return invalid(f"unknown field {k!r}", f"{p}.{k}" if isinstance(k, str) else p)
    out: dict[str, Any] = {}
    for name in EXTERNAL_ACTOR_FIELDS:
        fp = _ACTOR_PARAMS[name]
        if name not in raw:
            if name in ("source", "actor_id"):
                return invalid(f"{fp} is required", fp)
            continue
        v = raw[name]
        if name == "metadata":
            if v is not None:
                m = _metadata(v, fp, limits)
                if isinstance(m, ApiError):
                    return m
                v = m
        elif name == "actor_name" and v is None:
            pass
        elif not isinstance(v, str) or (not v and name != "actor_name"):
            what = "a string or null" if name == "actor_name" else "a non-empty string"
            return invalid(f"{fp} must be {what}, got {type_name(v)}", fp)
        elif len(v) > limits.max_actor_field_length:
            return invalid(f"{fp} is longer than {limits.max_actor_field_length} characters", fp)
        else:
            err = check_string(v, fp)
            if err is not None:
                return err
        out[name] = v
    # exactly as sent: the keys in the order they came
    return {k: out[k] for k in raw}


def _id_and_envelope(
    body: dict[str, Any], id_name: str, limits: Limits
) -> tuple[str | None, Envelope] | ApiError:
    """The client's idempotency id, then ``metadata``, ``tags``, ``external_actor`` — the
    fields every body ends with."""
    client_id = _id_field(body, id_name, limits, required=False)
    if isinstance(client_id, ApiError):
        return client_id
    raw_metadata, raw_tags, raw_actor = (
        body.get("metadata"), body.get("tags"), body.get("external_actor")
    )
    if raw_metadata is None and raw_tags is None and raw_actor is None:
        return client_id, NO_ENVELOPE
    metadata = tags = actor = None
    if raw_metadata is not None:
        m = _metadata(raw_metadata, "metadata", limits)
        if isinstance(m, ApiError):
            return m
        metadata = m
    if raw_tags is not None:
        t = _tags(raw_tags, limits)
        if isinstance(t, ApiError):
            return t
        tags = t
    if raw_actor is not None:
        a = _external_actor(raw_actor, limits)
        if isinstance(a, ApiError):
            return a
        actor = a
    return client_id, Envelope(metadata, tags, actor)


# ---------------------------------------------------------------------------------------
# bodies
# ---------------------------------------------------------------------------------------


def read_create(
    body: object, limits: Limits, profiles: Mapping[str, HarnessProfile]
) -> tuple[AdmittedCreate, ContentWalk] | ApiError:
    if not isinstance(body, dict):
        return invalid(f"request body must be a JSON object, got {type_name(body)}", None)
    err = _unknown_top_level(body, CREATE_FIELDS)
    if err is not None:
        return err
    harness = body.get("harness")
    if "harness" not in body:
        return invalid("harness is required", "harness")
    if not isinstance(harness, str) or harness not in profiles:
        return invalid(f"harness must be one of {', '.join(profiles)}", "harness")
    placement = body.get("placement")
    if "placement" not in body:
        return invalid("placement is required", "placement")
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        return invalid(f"placement must be one of {', '.join(PLACEMENTS)}", "placement")
    if "input" not in body:
        return invalid("input is required", "input")
    raw_input = body["input"]
    walk = ContentWalk()
    if isinstance(raw_input, str):
        messages = content.text_input(raw_input, "input", walk)
    elif isinstance(raw_input, list):
        messages = content.check_messages(
            raw_input,
            "input",
            limits.max_messages_per_request,
            limits.max_parts_per_message,
            walk,
        )
    else:
        return invalid(
            f"input must be a string or an array of messages, got {type_name(raw_input)}",
            "input",
        )
    if isinstance(messages, ApiError):
        return messages
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        return invalid(f"stream must be a boolean, got {type_name(stream)}", "stream")
    rest = _id_and_envelope(body, "client_request_id", limits)
    if isinstance(rest, ApiError):
        return rest
    admitted = AdmittedCreate(
        harness, placement, messages, isinstance(raw_input, str), stream, *rest, len(walk.images)
    )
    return admitted, walk


def read_event(
    body: object, limits: Limits
) -> tuple[AdmittedMessageEvent | AdmittedToolResult, ContentWalk] | ApiError:
    if not isinstance(body, dict):
        return invalid(f"request body must be a JSON object, got {type_name(body)}", None)
    if "type" not in body:
        return invalid(f"event type is required: {' or '.join(EVENT_TYPES)}", "type")
    etype = body["type"]
    if etype == MESSAGE_EVENT and isinstance(etype, str):
        return _unknown_top_level(body, MESSAGE_EVENT_FIELDS) or _message_event(body, limits)
    if etype == TOOL_RESULT_EVENT and isinstance(etype, str):
        return _unknown_top_level(body, TOOL_RESULT_FIELDS) or _tool_result(body, limits)
    return invalid(f"event type must be {' or '.join(EVENT_TYPES)}", "type")


def _message_event(
    body: dict[str, Any], limits: Limits
) -> tuple[AdmittedMessageEvent, ContentWalk] | ApiError:
    if "input" not in body:
        return invalid("input is required", "input")
    raw_input = body["input"]
    if isinstance(raw_input, str):
        return invalid("event input must be an array of messages, not a string", "input")
    if not isinstance(raw_input, list):
        return invalid(f"event input must be an array, got {type_name(raw_input)}", "input")
    walk = ContentWalk()
    messages = content.check_messages(
        raw_input, "input", limits.max_messages_per_request, limits.max_parts_per_message, walk
    )
    if isinstance(messages, ApiError):
        return messages
    rest = _id_and_envelope(body, "client_event_id", limits)
    if isinstance(rest, ApiError):
        return rest
    return AdmittedMessageEvent(messages, *rest, len(walk.images)), walk


def _tool_result(
    body: dict[str, Any], limits: Limits
) -> tuple[AdmittedToolResult, ContentWalk] | ApiError:
    call_id = _id_field(body, "call_id", limits, required=True)
    if isinstance(call_id, ApiError):
        return call_id
    assert call_id is not None
    if "success" not in body:
        return invalid("success is required (true or false)", "success")
    success = body["success"]
    if not isinstance(success, bool):
        return invalid(f"success must be a boolean, got {type_name(success)}", "success")
    walk = ContentWalk()
    output: str | list[dict[str, Any]] | ApiError | None = None
    raw_out = body.get("output")
    if isinstance(raw_out, str):
        output = check_string(raw_out, "output") or raw_out
    elif isinstance(raw_out, list):
        output = content.output_parts(raw_out, "output", limits.max_parts_per_message, walk)
    elif raw_out is not None:
        return invalid(
            f"output must be a string, an array of parts or null, got {type_name(raw_out)}",
            "output",
        )
    if isinstance(output, ApiError):
        return output
    error = body.get("error")
    if error is not None:
        if not isinstance(error, str):
            return invalid(f"error must be a string or null, got {type_name(error)}", "error")
        err = check_string(error, "error")
        if err is not None:
            return err
    fields_present = tuple(k for k in body if k in ("output", "error"))
    rest = _id_and_envelope(body, "client_event_id", limits)
    if isinstance(rest, ApiError):
        return rest
    admitted = AdmittedToolResult(
        call_id, success, output, error, fields_present, *rest, len(walk.images)
    )
    return admitted, walk

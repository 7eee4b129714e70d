"""The one admission validator, used by the HTTP API and the ``session.input`` topic alike, so
both answer identically. Pure: no Kafka, store or HTTP import.

``validate_create(body, limits)`` and ``validate_event(body, harness, placement, limits)`` take the
parsed JSON body (whatever ``json.loads`` produced) and return either the admitted value — with a
defensive deep copy of exactly what was sent and a JSON-ready ``record()`` — or an ``ApiError``.
They never raise for any input.

Order of checks (the first failure is the answer; docs/admission.md):

1. body shape — 400 ``invalid_request`` — field by field in the order of ``CREATE_FIELDS`` /
   ``MESSAGE_EVENT_FIELDS`` / ``TOOL_RESULT_FIELDS`` (unknown fields first); the content structure
   is walked in document order where its field comes: messages, parts, the "image or non-empty
   text" rule, the message and part count limits;
2. the images-per-request count — 400 ``invalid_request``;
3. image data, in document order: data URI, canonical base64, decoded bytes (413), format, pixels
   (413), full decode — 400 ``invalid_request`` / 413 ``request_too_large``;
4. the harness profile: placement, batch size, message images, whitespace-only messages, function
   results — 400 ``unsupported_or_invalid_configuration``.

So a request that is both malformed and unsupported is answered as malformed.

The 413 for the request body is the entry point's (it has the bytes): ``check_body_size``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from shared.domain.content import (
    ContentWalk,
    check_messages,
    check_parts,
    check_string,
    copy_json,
    type_name,
)
from shared.domain.errors import ApiError, invalid, too_large, unsupported
from shared.domain.harness import PLACEMENTS, PROFILES, HarnessProfile
from shared.domain.images import check_image_url
from shared.domain.whitespace import has_non_whitespace

if TYPE_CHECKING:
    from shared.settings import Settings

MESSAGE_EVENT: Final = "agent.session.input.message"
TOOL_RESULT_EVENT: Final = "agent.session.input.tool_result"
EVENT_TYPES = (MESSAGE_EVENT, TOOL_RESULT_EVENT)

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


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 32 * 1024 * 1024
    max_image_bytes: int = 5 * 1024 * 1024
    max_image_pixels: int = 40_000_000
    max_images_per_request: int = 20
    max_parts_per_message: int = 1_000
    max_messages_per_request: int = 100
    max_id_length: int = 255  # client_request_id, client_event_id, call_id
    # metadata, tags and external_actor (docs/admission.md "Metadata, tags, external actor")
    max_metadata_bytes: int = 16 * 1024  # compact JSON, UTF-8 (each metadata object)
    max_metadata_keys: int = 64  # top-level keys of each metadata object
    max_tags: int = 20
    max_tag_length: int = 64  # characters
    max_actor_field_length: int = 255  # source, actor_id, actor_name (characters)

    @classmethod
    def from_settings(cls, s: Settings) -> Limits:
        return cls(
            max_body_bytes=s.max_body_bytes,
            max_image_bytes=s.max_image_bytes,
            max_image_pixels=s.max_image_pixels,
            max_images_per_request=s.max_images_per_request,
            max_parts_per_message=s.max_parts_per_message,
            max_messages_per_request=s.max_messages_per_request,
        )


def check_body_size(nbytes: int, limits: Limits) -> ApiError | None:
    """413 when a request body (HTTP body or ``session.input`` record value) is over the limit."""
    if nbytes > limits.max_body_bytes:
        return too_large(
            f"request body is {nbytes} bytes; the limit is {limits.max_body_bytes}", None
        )
    return None


# ---------------------------------------------------------------------------------------
# admitted values
# ---------------------------------------------------------------------------------------


def _copy(value: Any) -> Any:
    """Deep copy of admitted (already plain) JSON, key order kept."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Envelope:
    """The optional fields every create/event body may carry (``null`` is stored as absent)."""

    metadata: dict[str, Any] | None
    tags: list[str] | None
    external_actor: dict[str, Any] | None

    def record(self) -> dict[str, Any]:
        return {
            "metadata": _copy(self.metadata),
            "tags": _copy(self.tags),
            "external_actor": _copy(self.external_actor),
        }


@dataclass(frozen=True, slots=True)
class AdmittedCreate:
    harness: str
    placement: str
    input: list[dict[str, Any]]  # the messages exactly as sent (a string input: one text message)
    input_was_string: bool
    stream: bool
    client_request_id: str | None
    envelope: Envelope
    image_count: int

    @property
    def has_images(self) -> bool:
        return self.image_count > 0

    def record(self) -> dict[str, Any]:
        return {
            "harness": self.harness,
            "placement": self.placement,
            "input": _copy(self.input),
            "input_was_string": self.input_was_string,
            "stream": self.stream,
            "client_request_id": self.client_request_id,
            **self.envelope.record(),
            "has_images": self.has_images,
        }


@dataclass(frozen=True, slots=True)
class AdmittedMessageEvent:
    input: list[dict[str, Any]]
    client_event_id: str | None
    envelope: Envelope
    image_count: int
    type: Literal["agent.session.input.message"] = MESSAGE_EVENT

    @property
    def has_images(self) -> bool:
        return self.image_count > 0

    def record(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "input": _copy(self.input),
            "client_event_id": self.client_event_id,
            **self.envelope.record(),
            "has_images": self.has_images,
        }


@dataclass(frozen=True, slots=True)
class AdmittedToolResult:
    call_id: str
    success: bool
    output: str | list[dict[str, Any]] | None
    error: str | None
    fields_present: tuple[str, ...]  # which of "output" / "error" the body had, in sent order
    client_event_id: str | None
    envelope: Envelope
    image_count: int
    type: Literal["agent.session.input.tool_result"] = TOOL_RESULT_EVENT

    @property
    def has_images(self) -> bool:
        return self.image_count > 0

    def submission(self) -> dict[str, Any]:
        """The result exactly as submitted: ``success`` and only the present ``output``/``error``
        (in the sent order)."""
        sub: dict[str, Any] = {"call_id": self.call_id, "success": self.success}
        for name in self.fields_present:
            sub[name] = _copy(self.output if name == "output" else self.error)
        return sub

    def identity(self) -> str:
        """Retry identity of the result (CONTRACT §1: an identical repeat is ``duplicate``, a
        different one 409): canonical JSON of ``submission()``. Presence matters: an absent
        ``output`` differs from ``"output": null``. Envelope fields are not part of it."""
        return json.dumps(
            self.submission(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )

    def record(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "call_id": self.call_id,
            "success": self.success,
            "output": _copy(self.output),
            "error": self.error,
            "fields_present": list(self.fields_present),
            "client_event_id": self.client_event_id,
            **self.envelope.record(),
            "has_images": self.has_images,
        }


# ---------------------------------------------------------------------------------------
# field checks
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
        p = f"tags[{i}]"
        if not isinstance(t, str):
            return invalid(f"a tag must be a string, got {type_name(t)}", p)
        if len(t) > limits.max_tag_length:
            return invalid(f"a tag is longer than {limits.max_tag_length} characters", p)
        err = check_string(t, p)
        if err is not None:
            return err
    return list(raw)


def _envelope(body: dict[str, Any], limits: Limits) -> Envelope | ApiError:
    metadata: dict[str, Any] | None = None
    if body.get("metadata") is not None:
        m = _metadata(body["metadata"], "metadata", limits)
        if isinstance(m, ApiError):
            return m
        metadata = m
    tags: list[str] | None = None
    if body.get("tags") is not None:
        t = _tags(body["tags"], limits)
        if isinstance(t, ApiError):
            return t
        tags = t
    actor: dict[str, Any] | None = None
    if body.get("external_actor") is not None:
        a = _external_actor(body["external_actor"], limits)
        if isinstance(a, ApiError):
            return a
        actor = a
    return Envelope(metadata, tags, actor)


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
        fp = f"{p}.{name}"
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


def _count_images(walk: ContentWalk, limits: Limits) -> ApiError | None:
    if len(walk.images) > limits.max_images_per_request:
        param = walk.images[limits.max_images_per_request][0].removesuffix(".image_url")
        return invalid(f"more than {limits.max_images_per_request} images in one request", param)
    return None


def _check_images(walk: ContentWalk, limits: Limits) -> ApiError | None:
    for param, url in walk.images:
        res = check_image_url(
            url,
            max_bytes=limits.max_image_bytes,
            max_pixels=limits.max_image_pixels,
            param=param,
        )
        if isinstance(res, ApiError):
            return res
    return None


def _check_message_profile(
    profile: HarnessProfile,
    placement: str,
    messages: list[dict[str, Any]],
    walk: ContentWalk,
) -> ApiError | None:
    bound = profile.max_user_messages_per_batch
    if bound is not None and len(messages) > bound:
        return unsupported(
            f"{profile.title} accepts at most {bound} user messages in one native Turn",
            f"input[{bound}]",
        )
    images_ok = profile.images_allowed(placement)
    whitespace_candidates = set(walk.whitespace_candidates)
    for i, m in enumerate(messages):
        part_param = walk.first_image_part.get(i)
        if part_param is not None:
            if not images_ok:
                return unsupported(
                    f"{profile.title} does not accept images"
                    + ("" if profile.text_only else f" on placement {placement!r}"),
                    part_param,
                )
        elif (
            i in whitespace_candidates
            and profile.whitespace_only == "reject"
            and not any(has_non_whitespace(p["text"]) for p in m["content"])
        ):
            return unsupported(
                f"{profile.title} cannot run a message with no image and no non-whitespace text",
                f"input[{i}].content",
            )
    return None


def _profile(
    harness: str, placement: str, profiles: Mapping[str, HarnessProfile]
) -> HarnessProfile | ApiError:
    profile = profiles.get(harness)
    if profile is None:  # the Session's own harness: a server-side inconsistency
        return ApiError("internal_error", f"the Session's harness {harness!r} is unknown", None)
    if placement not in profile.placements:
        return unsupported(f"{profile.title} does not run on placement {placement!r}", "placement")
    return profile


# ---------------------------------------------------------------------------------------
# the validators
# ---------------------------------------------------------------------------------------


def validate_create(
    body: object, limits: Limits, profiles: Mapping[str, HarnessProfile] = PROFILES
) -> AdmittedCreate | ApiError:
    """``POST /v1/sessions`` / ``op: sessions.create``. The Kafka entry point removes its envelope
    keys (``op``, ``request_id``) before calling this."""
    try:
        return _validate_create(body, limits, profiles)
    except RecursionError:
        return invalid("request is nested too deeply", None)


def _validate_create(
    body: object, limits: Limits, profiles: Mapping[str, HarnessProfile]
) -> AdmittedCreate | ApiError:
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
    messages: list[dict[str, Any]] | ApiError
    if isinstance(raw_input, str):
        if not raw_input:
            return invalid("input must not be an empty string", "input")
        err = check_string(raw_input, "input")
        if err is not None:
            return err
        messages = [{"role": "user", "content": [{"type": "input_text", "text": raw_input}]}]
        walk.whitespace_candidates.append(0)
    elif isinstance(raw_input, list):
        messages = check_messages(
            raw_input,
            "input",
            limits.max_messages_per_request,
            limits.max_parts_per_message,
            walk,
        )
        if isinstance(messages, ApiError):
            return messages
    else:
        return invalid(
            f"input must be a string or an array of messages, got {type_name(raw_input)}",
            "input",
        )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        return invalid(f"stream must be a boolean, got {type_name(stream)}", "stream")
    client_request_id = _id_field(body, "client_request_id", limits, required=False)
    if isinstance(client_request_id, ApiError):
        return client_request_id
    envelope = _envelope(body, limits)
    if isinstance(envelope, ApiError):
        return envelope
    err = _check_against_profile(harness, placement, messages, walk, limits, profiles)
    if err is not None:
        return err
    return AdmittedCreate(
        harness=harness,
        placement=placement,
        input=messages,
        input_was_string=isinstance(raw_input, str),
        stream=stream,
        client_request_id=client_request_id,
        envelope=envelope,
        image_count=len(walk.images),
    )


def validate_event(
    body: object,
    harness: str,
    placement: str,
    limits: Limits,
    profiles: Mapping[str, HarnessProfile] = PROFILES,
) -> AdmittedMessageEvent | AdmittedToolResult | ApiError:
    """``POST /v1/sessions/{id}/events`` / ``op: events.create``; ``harness`` and ``placement``
    are the Session's. The Kafka entry point removes ``op``, ``request_id`` and ``session_id``
    before calling this."""
    try:
        return _validate_event(body, harness, placement, limits, profiles)
    except RecursionError:
        return invalid("request is nested too deeply", None)


def _validate_event(
    body: object,
    harness: str,
    placement: str,
    limits: Limits,
    profiles: Mapping[str, HarnessProfile],
) -> AdmittedMessageEvent | AdmittedToolResult | ApiError:
    if not isinstance(body, dict):
        return invalid(f"request body must be a JSON object, got {type_name(body)}", None)
    if "type" not in body:
        return invalid(f"event type is required: {' or '.join(EVENT_TYPES)}", "type")
    etype = body["type"]
    if etype == MESSAGE_EVENT and isinstance(etype, str):
        return _message_event(body, harness, placement, limits, profiles)
    if etype == TOOL_RESULT_EVENT and isinstance(etype, str):
        return _tool_result(body, harness, placement, limits, profiles)
    return invalid(f"event type must be {' or '.join(EVENT_TYPES)}", "type")


def _check_against_profile(
    harness: str,
    placement: str,
    messages: list[dict[str, Any]],
    walk: ContentWalk,
    limits: Limits,
    profiles: Mapping[str, HarnessProfile],
) -> ApiError | None:
    """The checks after the shape walk, shared by Session creation and message events: image
    count and image data, then the harness profile (images per placement, whitespace-only)."""
    profile = _images_then_profile(harness, placement, walk, limits, profiles)
    if isinstance(profile, ApiError):
        return profile
    return _check_message_profile(profile, placement, messages, walk)


def _images_then_profile(
    harness: str, placement: str, walk: ContentWalk, limits: Limits,
    profiles: Mapping[str, HarnessProfile],
) -> HarnessProfile | ApiError:
    """Image count and image data, then the Session's harness profile (messages and results)."""
    err = _count_images(walk, limits) or _check_images(walk, limits)
    if err is not None:
        return err
    return _profile(harness, placement, profiles)


def _message_event(
    body: dict[str, Any],
    harness: str,
    placement: str,
    limits: Limits,
    profiles: Mapping[str, HarnessProfile],
) -> AdmittedMessageEvent | ApiError:
    err = _unknown_top_level(body, MESSAGE_EVENT_FIELDS)
    if err is not None:
        return err
    if "input" not in body:
        return invalid("input is required", "input")
    raw_input = body["input"]
    if isinstance(raw_input, str):
        return invalid("event input must be an array of messages, not a string", "input")
    if not isinstance(raw_input, list):
        return invalid(f"event input must be an array, got {type_name(raw_input)}", "input")
    walk = ContentWalk()
    messages = check_messages(
        raw_input, "input", limits.max_messages_per_request, limits.max_parts_per_message, walk
    )
    if isinstance(messages, ApiError):
        return messages
    client_event_id = _id_field(body, "client_event_id", limits, required=False)
    if isinstance(client_event_id, ApiError):
        return client_event_id
    envelope = _envelope(body, limits)
    if isinstance(envelope, ApiError):
        return envelope
    err = _check_against_profile(harness, placement, messages, walk, limits, profiles)
    if err is not None:
        return err
    return AdmittedMessageEvent(
        input=messages,
        client_event_id=client_event_id,
        envelope=envelope,
        image_count=len(walk.images),
    )


def _tool_result(
    body: dict[str, Any],
    harness: str,
    placement: str,
    limits: Limits,
    profiles: Mapping[str, HarnessProfile],
) -> AdmittedToolResult | ApiError:
    err = _unknown_top_level(body, TOOL_RESULT_FIELDS)
    if err is not None:
        return err
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
    output: str | list[dict[str, Any]] | None = None
    if "output" in body and body["output"] is not None:
        raw_out = body["output"]
        if isinstance(raw_out, str):
            err = check_string(raw_out, "output")
            if err is not None:
                return err
            output = raw_out
        elif isinstance(raw_out, list):
            if not raw_out:
                return invalid(
                    "output must not be an empty array (omit it or send null for no output)",
                    "output",
                )
            parts = check_parts(raw_out, "output", limits.max_parts_per_message, walk)
            if isinstance(parts, ApiError):
                return parts
            output = parts
        else:
            return invalid(
                f"output must be a string, an array of parts or null, got {type_name(raw_out)}",
                "output",
            )
    error: str | None = None
    if "error" in body and body["error"] is not None:
        if not isinstance(body["error"], str):
            return invalid(
                f"error must be a string or null, got {type_name(body['error'])}", "error"
            )
        err = check_string(body["error"], "error")
        if err is not None:
            return err
        error = body["error"]
    fields_present = tuple(k for k in body if k in ("output", "error"))
    client_event_id = _id_field(body, "client_event_id", limits, required=False)
    if isinstance(client_event_id, ApiError):
        return client_event_id
    envelope = _envelope(body, limits)
    if isinstance(envelope, ApiError):
        return envelope
    profile = _images_then_profile(harness, placement, walk, limits, profiles)
    if isinstance(profile, ApiError):
        return profile
    err = _check_result_profile(profile, success, output)
    if err is not None:
        return err
    return AdmittedToolResult(
        call_id=call_id,
        success=success,
        output=output,
        error=error,
        fields_present=fields_present,
        client_event_id=client_event_id,
        envelope=envelope,
        image_count=len(walk.images),
    )


def _check_result_profile(
    profile: HarnessProfile, success: bool, output: str | list[dict[str, Any]] | None
) -> ApiError | None:
    rules = profile.function_results
    if not rules.public_functions:
        return unsupported(f"{profile.title} has no public functions", "type")
    if output is None:
        return None
    if isinstance(output, str):
        parts: list[dict[str, Any]] = [{"type": "input_text", "text": output}]
    else:
        parts = output
    images_ok = rules.images_in_success if success else rules.images_in_failure
    for j, part in enumerate(parts):
        param = "output" if isinstance(output, str) else f"output[{j}]"
        if part["type"] == "input_text" and not rules.text_output:
            return unsupported(f"{profile.title} takes no text in a function result", param)
        if part["type"] == "input_image":
            if not images_ok:
                when = "a successful" if success else "a failed"
                return unsupported(
                    f"{profile.title} takes no image in {when} function result", param
                )
            fmt = "png" if part["image_url"].startswith("data:image/png;") else "jpeg"
            if fmt not in rules.image_formats:
                return unsupported(
                    f"{profile.title} takes no {fmt.upper()} image in a function result", param
                )
    return None

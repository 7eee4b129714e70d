"""The content model: pydantic v2 models for typing and the OpenAPI document, and the raw-JSON
walk that admission actually runs.

The models are strict and forbid extra fields, but admission does **not** validate through them:
pydantic would coerce nothing in strict mode, yet it would rebuild the values (dropping the
absence of an optional key such as a message's ``type``, and the key order). The walk below works
on the parsed JSON itself (dict/list/str/int/float/bool/None), checks every rule, and returns a
defensive deep copy of exactly what was sent. ``tests/unit/test_admission_models.py`` checks that
everything the walk admits also validates against the models.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.domain.errors import ApiError, invalid, join_path

# ---------------------------------------------------------------------------------------
# pydantic models (documentation and typing)
# ---------------------------------------------------------------------------------------

_STRICT = ConfigDict(strict=True, extra="forbid")

DATA_URI_PATTERN = r"^data:image/(png|jpeg);base64,[A-Za-z0-9+/]*={0,2}$"


class InputText(BaseModel):
    model_config = _STRICT
    type: Literal["input_text"]
    text: str


class InputImage(BaseModel):
    model_config = _STRICT
    type: Literal["input_image"]
    image_url: Annotated[str, Field(pattern=DATA_URI_PATTERN)]


InputContent = Annotated[InputText | InputImage, Field(discriminator="type")]


class Message(BaseModel):
    model_config = _STRICT
    role: Literal["user"]
    type: Literal["message"] = "message"  # optional; explicit null or "" is invalid
    content: Annotated[list[InputContent], Field(min_length=1)]


# The documented shape of the envelope fields; the limits are enforced by the raw-JSON walk in
# admission.py (metadata: 16 KiB as compact JSON and 64 keys; docs/admission.md).
Metadata = Annotated[dict[str, Any], Field(max_length=64, description=(
    "free-form JSON object, stored and echoed exactly as sent, never interpreted; at most 64 "
    "keys and 16 KiB as compact UTF-8 JSON"))]
Tags = Annotated[list[Annotated[str, Field(max_length=64)]], Field(max_length=20)]
ActorField = Annotated[str, Field(min_length=1, max_length=255)]


class ExternalActor(BaseModel):
    model_config = _STRICT
    source: ActorField
    actor_id: ActorField
    actor_name: Annotated[str, Field(max_length=255)] | None = None
    metadata: Metadata | None = None


IdString = Annotated[str, Field(min_length=1, max_length=255)]


class CreateSessionBody(BaseModel):
    model_config = _STRICT
    harness: Literal["codex", "claude_code", "minimax_code"]
    placement: Literal["none", "openai_hosted", "self_hosted"]
    input: Annotated[str, Field(min_length=1)] | Annotated[list[Message], Field(min_length=1)]
    stream: bool = False
    client_request_id: IdString | None = None
    metadata: Metadata | None = None
    tags: Tags | None = None
    external_actor: ExternalActor | None = None


class MessageEventBody(BaseModel):
    model_config = _STRICT
    type: Literal["agent.session.input.message"]
    input: Annotated[list[Message], Field(min_length=1)]
    client_event_id: IdString | None = None
    metadata: Metadata | None = None
    tags: Tags | None = None
    external_actor: ExternalActor | None = None


class ToolResultEventBody(BaseModel):
    model_config = _STRICT
    type: Literal["agent.session.input.tool_result"]
    call_id: IdString
    success: bool
    output: str | Annotated[list[InputContent], Field(min_length=1)] | None = None
    error: str | None = None
    client_event_id: IdString | None = None
    metadata: Metadata | None = None
    tags: Tags | None = None
    external_actor: ExternalActor | None = None


EventBody = Annotated[MessageEventBody | ToolResultEventBody, Field(discriminator="type")]

# ---------------------------------------------------------------------------------------
# the raw-JSON walk
# ---------------------------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_JSON_DEPTH = 32  # nesting inside metadata (the store allows 100 levels for a whole document)

MESSAGE_KEYS = ("role", "type", "content")
TEXT_PART_KEYS = ("type", "text")
IMAGE_PART_KEYS = ("type", "image_url")
# The fast paths below take a value the full checks would admit, and nothing else; anything
# else goes through the full checks, which name the error (issue 18 item 4: the error path
# builds JSON paths, the valid path does not).
_MESSAGE_KEY_SET = frozenset(MESSAGE_KEYS)
_TEXT_PART_KEY_SET = frozenset(TEXT_PART_KEYS)
PART_TYPES = ("input_text", "input_image")


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def check_string(value: str, param: str) -> ApiError | None:
    """Text must be encodable as UTF-8: a JSON ``\\ud800`` escape parses into a lone surrogate
    that no store or Kafka record can carry."""
    if not value.isascii() and _SURROGATE.search(value):
        return invalid("string contains an unpaired UTF-16 surrogate", param)
    return None


def copy_json(value: object, param: str, depth: int = 0) -> Any:
    """A deep copy of a JSON value (key order kept), or an ApiError naming the first value that
    is not plain, storable JSON: non-string keys, lone surrogates, non-finite numbers, integers
    outside int64, nesting deeper than ``MAX_JSON_DEPTH``, or non-JSON Python objects."""
    if depth > MAX_JSON_DEPTH:
        return invalid(f"nested deeper than {MAX_JSON_DEPTH} levels", param)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return check_string(value, param) or value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return invalid("integer outside the 64-bit range", param)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return invalid("number must be finite", param)
        return value
    if isinstance(value, list):
        out_list: list[Any] = []
        for i, item in enumerate(value):
            c = copy_json(item, join_path(param, i), depth + 1)
            if isinstance(c, ApiError):
                return c
            out_list.append(c)
        return out_list
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                return invalid("object keys must be strings", param)
            kp = join_path(param, k)
            err = check_string(k, kp)
            if err is not None:
                return err
            c = copy_json(v, kp, depth + 1)
            if isinstance(c, ApiError):
                return c
            out[k] = c
        return out
    return invalid(f"not a JSON value ({type(value).__name__})", param)


@dataclass(slots=True)
class ContentWalk:
    """What the structural walk found, for the checks that come after it."""

    images: list[tuple[str, str]] = field(default_factory=list)  # (param of image_url, url)
    first_image_part: dict[int, str] = field(default_factory=dict)  # message index → part param
    whitespace_candidates: list[int] = field(default_factory=list)  # messages without image


def _unknown_field(obj: dict[str, Any], allowed: tuple[str, ...], param: str) -> ApiError | None:
    for k in obj:
        if k not in allowed:
            kp = join_path(param, k) if isinstance(k, str) else param
            hint = ""
            if k in ("file_id", "detail"):
                hint = " (Core accepts only inline data URIs: no file_id or detail)"
            return invalid(f"unknown field {k!r}{hint}", kp)
    return None


def check_part(raw: object, param: str, walk: ContentWalk) -> dict[str, Any] | ApiError:
    """One ``input_text`` / ``input_image`` part → a copy, or the error. Images are recorded in
    ``walk`` and checked later (image data checks are costlier than the shape walk)."""
    if not isinstance(raw, dict):
        return invalid(f"a content part must be an object, got {type_name(raw)}", param)
    ptype = raw.get("type")
    if "type" not in raw:
        return invalid("content part type is required (input_text or input_image)", f"{param}.type")
    if ptype == "input_text":
        err = _unknown_field(raw, TEXT_PART_KEYS, param)
        if err is not None:
            return err
        text = raw.get("text")
        if "text" not in raw:
            return invalid("input_text part needs a text string", f"{param}.text")
        if not isinstance(text, str):
            return invalid(f"text must be a string, got {type_name(text)}", f"{param}.text")
        err = check_string(text, f"{param}.text")
        if err is not None:
            return err
        return dict(raw)
    if ptype == "input_image":
        err = _unknown_field(raw, IMAGE_PART_KEYS, param)
        if err is not None:
            return err
        url = raw.get("image_url")
        if "image_url" not in raw:
            return invalid("input_image part needs an image_url", f"{param}.image_url")
        if not isinstance(url, str):
            return invalid(
                f"image_url must be a data URI string, got {type_name(url)}", f"{param}.image_url"
            )
        walk.images.append((f"{param}.image_url", url))
        return dict(raw)
    shown = ptype if isinstance(ptype, str) else type_name(ptype)
    return invalid(
        f"unsupported content part type {shown!r}; use input_text or input_image",
        f"{param}.type",
    )


def check_parts(
    raw: list[Any], param: str, max_parts: int, walk: ContentWalk
) -> list[dict[str, Any]] | ApiError:
    if len(raw) > max_parts:
        return invalid(f"more than {max_parts} content parts", join_path(param, max_parts))
    out: list[dict[str, Any]] = []
    text_keys, surrogate = _TEXT_PART_KEY_SET, _SURROGATE.search
    for j, part in enumerate(raw):
        if (type(part) is dict and part.get("type") == "input_text"
                and part.keys() <= text_keys and type(text := part.get("text")) is str
                and (text.isascii() or not surrogate(text))):
            out.append(dict(part))  # a valid text part (check_part's own first branch)
            continue
        c = check_part(part, join_path(param, j), walk)
        if isinstance(c, ApiError):
            return c
        out.append(c)
    return out


def check_message(
    raw: object, index: int, param: str, max_parts: int, walk: ContentWalk
) -> dict[str, Any] | ApiError:
    """One message ``{"role": "user", "type"?: "message", "content": [...]}`` → a copy in the
    sent key order, or the error."""
    if not isinstance(raw, dict):
        return invalid(f"a message must be an object, got {type_name(raw)}", param)
    if not raw.keys() <= _MESSAGE_KEY_SET:
        err = _unknown_field(raw, MESSAGE_KEYS, param)
        if err is not None:
            return err
    if "role" not in raw:
        return invalid('message role is required and must be "user"', f"{param}.role")
    if raw["role"] != "user" or not isinstance(raw["role"], str):
        return invalid('message role must be "user"', f"{param}.role")
    if "type" in raw and (raw["type"] != "message" or not isinstance(raw["type"], str)):
        return invalid(
            'message type, when present, must be "message" (null and "" are invalid)',
            f"{param}.type",
        )
    if "content" not in raw:
        return invalid("message content is required", f"{param}.content")
    content = raw["content"]
    cparam = f"{param}.content"
    if isinstance(content, str):
        return invalid("message content must be an array of parts, not a string", cparam)
    if not isinstance(content, list):
        return invalid(f"message content must be an array, got {type_name(content)}", cparam)
    if not content:
        return invalid("message content must not be empty", cparam)
    n_images = len(walk.images)
    parts = check_parts(content, cparam, max_parts, walk)
    if isinstance(parts, ApiError):
        return parts
    if len(walk.images) > n_images:
        first = next(j for j, p in enumerate(parts) if p["type"] == "input_image")
        walk.first_image_part[index] = join_path(cparam, first)
    elif not any(p["text"] for p in parts):
        return invalid("a message needs an image or at least one non-empty text part", cparam)
    else:
        walk.whitespace_candidates.append(index)
    out = dict(raw)  # the sent key order; replacing a key keeps its place
    out["content"] = parts
    return out


def check_messages(
    raw: list[Any], param: str, max_messages: int, max_parts: int, walk: ContentWalk
) -> list[dict[str, Any]] | ApiError:
    if not raw:
        return invalid("input must not be empty", param)
    if len(raw) > max_messages:
        return invalid(f"more than {max_messages} messages", join_path(param, max_messages))
    out: list[dict[str, Any]] = []
    for i, m in enumerate(raw):
        c = check_message(m, i, join_path(param, i), max_parts, walk)
        if isinstance(c, ApiError):
            return c
        out.append(c)
    return out

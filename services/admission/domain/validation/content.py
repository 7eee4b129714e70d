"""Step 2 of admission: the content parts — messages, ``input_text`` and ``input_image`` parts
— walked in document order, then the images' count and data.

The walk works on the parsed JSON itself, checks every rule and returns a copy of exactly what
was sent (key order, the presence or absence of a message's ``type``, empty text parts). The
envelope step calls the walk where the content's field comes in the body; the image data checks
(``services.admission.domain.images``, the costly part) run once the whole body's shape is known
good.

A valid message or part takes a fast path that builds no JSON path; anything else goes through
the full checks, which name the error and its path.
"""

from __future__ import annotations

from typing import Any

from services.admission.domain.images import DecodeBudget, check_image_url
from services.admission.domain.validation.limits import Limits
from services.admission.domain.validation.values import SURROGATE, check_string, type_name
from shared.domain.errors import ApiError, invalid, join_path

MESSAGE_KEYS = ("role", "type", "content")
TEXT_PART_KEYS = ("type", "text")
IMAGE_PART_KEYS = ("type", "image_url")
PART_TYPES = ("input_text", "input_image")
_MESSAGE_KEY_SET = frozenset(MESSAGE_KEYS)
_TEXT_PART_KEY_SET = frozenset(TEXT_PART_KEYS)
_IMAGE_SUFFIX = ".image_url"
# part type → (its keys, its value's key, the error when that is missing, when it is no string)
_PART_RULES = {
    "input_text": (
        TEXT_PART_KEYS, "text", "input_text part needs a text string", "text must be a string"
    ),
    "input_image": (
        IMAGE_PART_KEYS,
        "image_url",
        "input_image part needs an image_url",
        "image_url must be a data URI string",
    ),
}


class ContentWalk:
    """What the walk found, for the image checks and the harness profile that come after it."""

    __slots__ = ("first_image_part", "images", "whitespace_candidates")

    def __init__(self) -> None:
        self.images: list[tuple[str, str]] = []  # (param of image_url, url), document order
        self.first_image_part: dict[int, str] = {}  # message index → param of its first image
        self.whitespace_candidates: list[int] = []  # messages with no image


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
    ``walk`` and checked by ``check_images`` once the walk is done."""
    if not isinstance(raw, dict):
        return invalid(f"a content part must be an object, got {type_name(raw)}", param)
    ptype = raw.get("type")
    if "type" not in raw:
        return invalid("content part type is required (input_text or input_image)", f"{param}.type")
    rule = _PART_RULES.get(ptype) if isinstance(ptype, str) else None
    if rule is not None:
        keys, name, missing, wrong = rule
        err = _unknown_field(raw, keys, param)
        if err is not None:
            return err
        fparam = f"{param}.{name}"
        if name not in raw:
            return invalid(missing, fparam)
        value = raw[name]
        if not isinstance(value, str):
            return invalid(f"{wrong}, got {type_name(value)}", fparam)
        if ptype == "input_text":
            err = check_string(value, fparam)
            if err is not None:
                return err
        else:
            walk.images.append((fparam, value))
        return dict(raw)
    shown = ptype if isinstance(ptype, str) else type_name(ptype)
    return invalid(
        f"unsupported content part type {shown!r}; use input_text or input_image",
        f"{param}.type",
    )


def _content_param(base: str, message: int) -> str:
    """The path of a part array: a message's ``content`` (``message`` ≥ 0) or ``base`` itself."""
    return f"{base}[{message}].content" if message >= 0 else base


def check_parts(
    raw: list[Any], base: str, max_parts: int, walk: ContentWalk, message: int = -1
) -> list[dict[str, Any]] | ApiError:
    """The parts of message ``message`` of the array at ``base``, or, with no message, the part
    array at ``base`` itself (a function result's ``output``)."""
    if len(raw) > max_parts:
        param = _content_param(base, message)
        return invalid(f"more than {max_parts} content parts", join_path(param, max_parts))
    out: list[dict[str, Any]] = []
    text_keys, surrogate = _TEXT_PART_KEY_SET, SURROGATE.search
    for j, part in enumerate(raw):
        if (type(part) is dict and part.get("type") == "input_text"
                and part.keys() <= text_keys and type(text := part.get("text")) is str
                and (text.isascii() or not surrogate(text))):
            out.append(dict(part))  # a valid text part (check_part's own first branch)
            continue
        c = check_part(part, join_path(_content_param(base, message), j), walk)
        if isinstance(c, ApiError):
            return c
        out.append(c)
    return out


def _message_shape(raw: object, param: str) -> ApiError | None:
    """Everything about one message but its parts, with the error's path."""
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
    return None


def _message(
    raw: Any, index: int, base: str, max_parts: int, walk: ContentWalk
) -> dict[str, Any] | ApiError:
    """Message ``index`` of the array at ``base`` (``{"role": "user", "type"?: "message",
    "content": [...]}``) → a copy in the sent key order, or the error."""
    if not (type(raw) is dict and raw.keys() <= _MESSAGE_KEY_SET
            and type(role := raw.get("role")) is str and role == "user"
            and type(mtype := raw.get("type", "message")) is str and mtype == "message"
            and type(content := raw.get("content")) is list and content):
        err = _message_shape(raw, join_path(base, index))
        if err is not None:
            return err
        content = raw["content"]
    n_images = len(walk.images)
    parts = check_parts(content, base, max_parts, walk, index)
    if isinstance(parts, ApiError):
        return parts
    if len(walk.images) > n_images:
        walk.first_image_part[index] = walk.images[n_images][0].removesuffix(_IMAGE_SUFFIX)
    else:
        for p in parts:
            if p["text"]:
                break
        else:
            return invalid(
                "a message needs an image or at least one non-empty text part",
                _content_param(base, index),
            )
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
        c = _message(m, i, param, max_parts, walk)
        if isinstance(c, ApiError):
            return c
        out.append(c)
    return out


def text_input(raw: str, param: str, walk: ContentWalk) -> list[dict[str, Any]] | ApiError:
    """A creation ``input`` string → one user message with one text part."""
    if not raw:
        return invalid("input must not be an empty string", param)
    err = check_string(raw, param)
    if err is not None:
        return err
    walk.whitespace_candidates.append(0)
    return [{"role": "user", "content": [{"type": "input_text", "text": raw}]}]


def output_parts(
    raw: list[Any], param: str, max_parts: int, walk: ContentWalk
) -> list[dict[str, Any]] | ApiError:
    """A function result's ``output`` array: a non-empty ordered list of parts."""
    if not raw:
        return invalid(
            "output must not be an empty array (omit it or send null for no output)", param
        )
    return check_parts(raw, param, max_parts, walk)


def check_images(walk: ContentWalk, limits: Limits) -> ApiError | None:
    """The images per request, then each image's data in document order."""
    if len(walk.images) > limits.max_images_per_request:
        param = walk.images[limits.max_images_per_request][0].removesuffix(_IMAGE_SUFFIX)
        return invalid(f"more than {limits.max_images_per_request} images in one request", param)
    budget = DecodeBudget(limits.max_decode_bytes_per_image, limits.max_decode_bytes_per_request)
    for param, url in walk.images:
        res = check_image_url(
            url,
            max_bytes=limits.max_image_bytes,
            max_pixels=limits.max_image_pixels,
            param=param,
            budget=budget,
        )
        if isinstance(res, ApiError):
            return res
    return None

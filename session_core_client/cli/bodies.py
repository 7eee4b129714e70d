"""Pure request building for the user CLI: files → data URIs, flags → the JSON bodies of
CONTRACT §1. No I/O beyond reading the image files named on the command line."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path
from typing import Any

Json = dict[str, Any]

# (kind, value) in command-line order: kind is "text", "image" (a file path) or "break"
# (start a new message).
Part = tuple[str, str | None]

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
)


class UsageError(ValueError):
    """A command line that cannot become a request (the CLI prints it and exits 2)."""


def sniff_media_type(data: bytes) -> str | None:
    """``image/png`` / ``image/jpeg`` from the file's magic bytes (never from its name)."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    return None


def data_uri(data: bytes, where: str = "image") -> str:
    media_type = sniff_media_type(data)
    if media_type is None:
        raise UsageError(f"{where}: not a PNG or JPEG file (Session Core takes only inline "
                         "PNG and JPEG images)")
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def image_part(path: str) -> Json:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    return {"type": "input_image", "image_url": data_uri(data, path)}


def text_part(text: str) -> Json:
    return {"type": "input_text", "text": text}


def messages_from_parts(parts: Sequence[Part]) -> list[Json]:
    """Ordered ``--text`` / ``--image`` / ``--next-message`` flags → public Messages."""
    messages: list[list[Json]] = [[]]
    for kind, value in parts:
        if kind == "break":
            if messages[-1]:
                messages.append([])
        elif kind == "text":
            assert value is not None
            messages[-1].append(text_part(value))
        elif kind == "image":
            assert value is not None
            messages[-1].append(image_part(value))
        else:
            raise UsageError(f"unknown part kind {kind!r}")
    out = [{"role": "user", "type": "message", "content": c} for c in messages if c]
    if not out:
        raise UsageError("give the input with --text and/or --image")
    return out


def create_body(
    *,
    harness: str,
    placement: str,
    parts: Sequence[Part],
    string_input: bool = False,
    stream: bool = False,
    client_request_id: str | None = None,
    metadata: Json | None = None,
    tags: Sequence[str] = (),
    actor: str | None = None,
) -> Json:
    """``POST /v1/sessions``. ``string_input`` sends a single ``--text`` as the string form of
    ``input`` (one text message, CONTRACT §1)."""
    if string_input:
        if len(parts) != 1 or parts[0][0] != "text" or parts[0][1] is None:
            raise UsageError("--string-input takes exactly one --text and no --image")
        input_: Any = parts[0][1]
    else:
        input_ = messages_from_parts(parts)
    body: Json = {"harness": harness, "placement": placement, "input": input_}
    if stream:
        body["stream"] = True
    if client_request_id:
        body["client_request_id"] = client_request_id
    return {**body, **envelope(metadata, tags, actor)}


def parse_actor(spec: str) -> Json:
    """``--actor source:actor_id[:actor name]`` → ``external_actor`` (the name may contain
    colons; everything after the second one is the name)."""
    source, sep, rest = spec.partition(":")
    actor_id, sep2, name = rest.partition(":")
    if not sep or not source or not actor_id:
        raise UsageError("--actor takes SOURCE:ACTOR_ID[:NAME], e.g. slack:U0123456789:Alice")
    actor: Json = {"source": source, "actor_id": actor_id}
    if sep2:
        actor["actor_name"] = name
    return actor


def envelope(metadata: Any = None, tags: Sequence[str] = (), actor: str | None = None) -> Json:
    """The optional ``metadata`` / ``tags`` / ``external_actor`` of any create or event body."""
    out: Json = {}
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise UsageError("--metadata takes a JSON object, e.g. '{\"thread\": \"42\"}'")
        out["metadata"] = metadata
    if tags:
        out["tags"] = list(tags)
    if actor is not None:
        out["external_actor"] = parse_actor(actor)
    return out


def message_event_body(parts: Sequence[Part], client_event_id: str | None = None,
                       metadata: Json | None = None, tags: Sequence[str] = (),
                       actor: str | None = None) -> Json:
    body: Json = {"type": "agent.session.input.message", "input": messages_from_parts(parts)}
    if client_event_id:
        body["client_event_id"] = client_event_id
    return {**body, **envelope(metadata, tags, actor)}


def tool_result_body(
    *,
    call_id: str,
    success: bool,
    output_parts: Sequence[Part] = (),
    error: str | None = None,
    output_as_parts: bool = False,
    client_event_id: str | None = None,
    metadata: Json | None = None,
    tags: Sequence[str] = (),
    actor: str | None = None,
) -> Json:
    """``agent.session.input.tool_result``. The output is a string when it is one ``--output``
    and no ``--output-image`` (unless ``output_as_parts``), an ordered array of parts when
    there are images or several texts, and absent without any. ``error`` is sent only when
    given."""
    body: Json = {"type": "agent.session.input.tool_result", "call_id": call_id,
                  "success": success}
    if output_parts:
        only_text = len(output_parts) == 1 and output_parts[0][0] == "text"
        if only_text and not output_as_parts:
            body["output"] = output_parts[0][1]
        else:
            parts: list[Json] = []
            for kind, value in output_parts:
                assert value is not None
                parts.append(text_part(value) if kind == "text" else image_part(value))
            body["output"] = parts
    if error is not None:
        body["error"] = error
    if client_event_id:
        body["client_event_id"] = client_event_id
    return {**body, **envelope(metadata, tags, actor)}

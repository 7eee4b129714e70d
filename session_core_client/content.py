"""Builders for the public content model (CONTRACT §1 "Message and content")."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

Json = dict[str, Any]

_PNG = b"\x89PNG\r\n\x1a\n"
_JPEG = b"\xff\xd8\xff"


def text_part(text: str) -> Json:
    """An ``input_text`` part; the text is sent exactly as given (Core never trims)."""
    return {"type": "input_text", "text": text}


def image_part(image: bytes | str | Path, media_type: str | None = None) -> Json:
    """An ``input_image`` part carrying the image inline as a canonical base64 data URI.

    ``image`` is the bytes of a PNG or JPEG file, or a path to one. The media type is taken from
    the file's signature unless given; Core checks the image again on admission."""
    data = Path(image).read_bytes() if isinstance(image, str | Path) else image
    if media_type is None:
        if data.startswith(_PNG):
            media_type = "image/png"
        elif data.startswith(_JPEG):
            media_type = "image/jpeg"
        else:
            raise ValueError("not a PNG or JPEG file; give media_type to send it anyway")
    return {"type": "input_image",
            "image_url": f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"}


def message(*parts: Json | str) -> Json:
    """A user message; a ``str`` part becomes an ``input_text`` part."""
    return {"role": "user", "type": "message",
            "content": [text_part(p) if isinstance(p, str) else p for p in parts]}


def as_messages(input_: str | Json | list[Json]) -> list[Json]:
    """Event input: a string becomes one text message, one message a list of one."""
    if isinstance(input_, str):
        return [message(input_)]
    if isinstance(input_, dict):
        return [input_]
    return list(input_)

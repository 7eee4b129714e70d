"""Builders of what tests send and what services publish: content parts, messages, request
bodies, ``session.admitted/1`` records, and images generated with Pillow in code (no binary
files in the repo)."""

from __future__ import annotations

import base64
import io
import random
import struct
import uuid
import zlib
from functools import cache
from typing import Any

from PIL import Image

from shared import records
from shared.domain.errors import ApiError
from shared.kafka import now_rfc3339

Json = dict[str, Any]


@cache
def png_bytes(width: int = 8, height: int = 8, noise: bool = False, mode: str = "RGB") -> bytes:
    if noise:
        rnd = random.Random(width * 7919 + height)
        im = Image.frombytes(mode, (width, height), rnd.randbytes(width * height * len(mode)))
    else:
        im = Image.new(mode, (width, height), (200, 30, 60) if mode == "RGB" else 128)
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


@cache
def jpeg_bytes(width: int = 8, height: int = 8) -> bytes:
    im = Image.new("RGB", (width, height), (10, 120, 240))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def _chunk(ctype: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + ctype + data + struct.pack(">I", zlib.crc32(ctype + data))


def png_with_header(width: int, height: int) -> bytes:
    """A structurally valid PNG (good CRCs, IEND last) whose IHDR claims ``width × height`` of
    1-bit greyscale, with one tiny IDAT. The header check must reject it before any decode."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 16)
    return (
        b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")
    )


def data_uri(data: bytes, fmt: str = "png") -> str:
    return f"data:image/{fmt};base64," + base64.b64encode(data).decode("ascii")


PNG_URI = data_uri(png_bytes())


JPEG_URI = data_uri(jpeg_bytes(), "jpeg")


def text(s: str) -> dict[str, Any]:
    return {"type": "input_text", "text": s}


def image(url: str = PNG_URI) -> dict[str, Any]:
    return {"type": "input_image", "image_url": url}


def msg(*parts: Any, **extra: Any) -> dict[str, Any]:
    return {"role": "user", **extra, "content": list(parts)}


def create_body(
    input_: Any, harness: str = "codex", placement: str = "none", **extra: Any
) -> dict[str, Any]:
    return {"harness": harness, "placement": placement, "input": input_, **extra}


def message_event(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "agent.session.input.message", "input": list(messages), **extra}


def tool_result(success: bool = True, **fields: Any) -> dict[str, Any]:
    return {
        "type": "agent.session.input.tool_result",
        "call_id": "call_1",
        "success": success,
        **fields,
    }


def assert_error(result: object, status: int, etype: str, param: str | None) -> ApiError:
    assert isinstance(result, ApiError), f"expected an error, got {result!r}"
    assert (result.status, result.type, result.param) == (status, etype, param), result
    return result


def png_data_uri(w: int = 4, h: int = 3, color: tuple[int, int, int] = (200, 10, 10)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def admitted_create(text: str, *, harness: str = "codex") -> Json:
    """A ``session.admitted/1`` record as admission publishes it for ``POST /v1/sessions``."""
    return {
        "schema": records.ADMITTED,
        "op": records.OP_CREATE,
        "request_id": f"req_{uuid.uuid4().hex}",
        "session_id": f"session_{uuid.uuid4().hex}",
        "event_id": f"evt_{uuid.uuid4().hex}",
        "admitted_at": now_rfc3339(),
        "fingerprint": uuid.uuid4().hex,
        "harness": harness,
        "placement": "none",
        "messages": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
        "input_was_string": False,
        "stream": False,
        "client_request_id": None,
        "metadata": None,
        "tags": None,
        "external_actor": None,
        "has_images": False,
    }


def admitted_event(session_id: str, text: str) -> Json:
    """A ``session.admitted/1`` record as admission publishes it for a message event."""
    return {
        "schema": records.ADMITTED, "op": records.OP_EVENT,
        "request_id": f"req_{uuid.uuid4().hex}", "session_id": session_id,
        "event_id": f"evt_{uuid.uuid4().hex}", "admitted_at": now_rfc3339(),
        "fingerprint": uuid.uuid4().hex, "event_type": records.EV_MESSAGE,
        "messages": [{"role": "user", "content": [{"type": "input_text", "text": text}]}],
        "client_event_id": None, "metadata": None, "tags": None, "external_actor": None,
        "has_images": False,
    }

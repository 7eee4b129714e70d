"""Where image bytes and long agent texts live. A data URI up to ``inline_image_max_bytes``
stays inline in its Item document; a larger one is replaced by ``{"image_ref": <sha256>}`` and
its text is stored in ``image_chunks`` (``image_chunk_bytes`` per document, content-addressed,
so a repeated image is stored once). An agent message's ``output_text`` longer than the same
bound (UTF-8 bytes) moves out the same way, as ``{"text_ref": …}``: a harness's answer has no
size bound of its own, and MongoDB refuses a document over 16 MiB. So does the text of a held
agent message in the Session's state (``said``, ``externalize_state``). Reads put the exact
original URI and text back (docs/storage.md, "Large values"). Documents stay far below BSON's
16 MB."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from shared.storekeys import chunk_key

Json = dict[str, Any]
OUTPUT_TEXT = "output_text"  # an agent message's text part


def _walk_parts(item: Json) -> list[Json]:
    if item.get("type") == "message":
        return list(item.get("content") or [])
    if item.get("type") == "function_call_output" and isinstance(item.get("output"), list):
        return list(item["output"])
    return []


def _long_text(text: Any, inline_max: int) -> bool:
    """A text longer than ``inline_max`` UTF-8 bytes (encoded only when its length in code
    points leaves it open: 1–4 bytes each)."""
    if not isinstance(text, str) or len(text) * 4 <= inline_max:
        return False
    return len(text) > inline_max or len(text.encode("utf-8")) > inline_max


def _moves_out(part: Any, inline_max: int) -> bool:
    """A part whose image or agent text is too large to stay inline in its Item document."""
    if not isinstance(part, dict):
        return False
    url = part.get("image_url")
    if isinstance(url, str):
        return len(url) > inline_max
    return part.get("type") == OUTPUT_TEXT and _long_text(part.get("text"), inline_max)


def _chunked(raw: bytes, chunk_bytes: int, chunks: list[Json]) -> Json:
    """``raw`` cut into ordered chunks (appended to ``chunks``); the reference to them."""
    sha = hashlib.sha256(raw).hexdigest()
    n = 0
    for start in range(0, len(raw), chunk_bytes):
        chunks.append({"_id": chunk_key(sha, n), "sha": sha, "n": n,
                       "data": raw[start:start + chunk_bytes]})
        n += 1
    return {"sha256": sha, "chunks": n, "length": len(raw)}


def externalize(item: Json, inline_max: int, chunk_bytes: int) -> tuple[Json, list[Json]]:
    """The Item as stored, and the chunks of its large images. An Item with no image to move
    out is returned itself, not a copy (most Items; a burst of verdicts is thousands of them):
    neither it nor the result may be changed afterwards."""
    if not any(_moves_out(p, inline_max) for p in _walk_parts(item)):
        return item, []
    out = copy.deepcopy(item)
    chunks: list[Json] = []
    for part in _walk_parts(out):
        if _moves_out(part, inline_max):
            # The key keeps its place in the part (key order round-trips); only its value
            # becomes a reference.
            if isinstance(part.get("image_url"), str):
                part["image_url"] = {"image_ref": _chunked(
                    part["image_url"].encode("ascii"), chunk_bytes, chunks)}
            else:
                part["text"] = {"text_ref": _chunked(
                    part["text"].encode("utf-8"), chunk_bytes, chunks)}
    return out, chunks


def externalize_state(state: Json | None, inline_max: int, chunk_bytes: int
                      ) -> tuple[Json | None, list[Json]]:
    """A Session's state document as stored: the text of a held agent message (``said``)
    longer than ``inline_max`` becomes ``{"text_ref": …}`` and its chunks. The storage
    domain takes either form (``services.storage.domain.sessions``: the text is opaque to it);
    an Item made from a reference is made whole before it is published (``whole``)."""
    said = state.get("said") if state is not None else None
    if state is None or not isinstance(said, dict) or not _long_text(said.get("text"),
                                                                     inline_max):
        return state, []
    chunks: list[Json] = []
    ref = _chunked(said["text"].encode("utf-8"), chunk_bytes, chunks)
    return {**state, "said": {**said, "text": {"text_ref": ref}}}, chunks


def _ref(part: Any) -> Json | None:
    if not isinstance(part, dict):
        return None
    if isinstance(part.get("image_url"), dict):
        ref: Json = part["image_url"]["image_ref"]
        return ref
    if isinstance(part.get("text"), dict):
        ref = part["text"]["text_ref"]
        return ref
    return None


def refs(item: Json) -> list[Json]:
    """The chunk references of the Item's parts (images and texts), in part order."""
    return [r for r in map(_ref, _walk_parts(item)) if r is not None]


def rehydrate(item: Json, data: dict[str, bytes]) -> Json:
    """``data`` maps sha256 → the URI's or the text's bytes."""
    for part in _walk_parts(item):
        if isinstance(part, dict) and isinstance(part.get("image_url"), dict):
            part["image_url"] = data[part["image_url"]["image_ref"]["sha256"]].decode("ascii")
        elif isinstance(part, dict) and isinstance(part.get("text"), dict):
            part["text"] = data[part["text"]["text_ref"]["sha256"]].decode("utf-8")
    return item

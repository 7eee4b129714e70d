"""Where image bytes live. A data URI up to ``inline_image_max_bytes`` stays inline in its Item
document; a larger one is replaced by ``{"image_ref": <sha256>}`` and its text is stored in
``image_chunks`` (``image_chunk_bytes`` per document, content-addressed, so a repeated image is
stored once). Reads put the exact original URI back. Documents stay far below BSON's 16 MB."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from shared.storekeys import chunk_key

Json = dict[str, Any]


def _walk_parts(item: Json) -> list[Json]:
    if item.get("type") == "message":
        return list(item.get("content") or [])
    if item.get("type") == "function_call_output" and isinstance(item.get("output"), list):
        return list(item["output"])
    return []


def _moves_out(part: Any, inline_max: int) -> bool:
    """A part whose image is too large to stay inline in its Item document."""
    url = part.get("image_url") if isinstance(part, dict) else None
    return isinstance(url, str) and len(url) > inline_max


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
            raw = part["image_url"].encode("ascii")
            sha = hashlib.sha256(raw).hexdigest()
            n = 0
            for start in range(0, len(raw), chunk_bytes):
                chunks.append({"_id": chunk_key(sha, n), "sha": sha, "n": n,
                               "data": raw[start:start + chunk_bytes]})
                n += 1
            # The key keeps its place in the part (key order round-trips); only its value
            # becomes a reference.
            part["image_url"] = {"image_ref": {"sha256": sha, "chunks": n, "length": len(raw)}}
    return out, chunks


def refs(item: Json) -> list[Json]:
    return [
        p["image_url"]["image_ref"]
        for p in _walk_parts(item)
        if isinstance(p, dict) and isinstance(p.get("image_url"), dict)
    ]


def rehydrate(item: Json, data: dict[str, bytes]) -> Json:
    """``data`` maps sha256 → the URI bytes."""
    for part in _walk_parts(item):
        if isinstance(part, dict) and isinstance(part.get("image_url"), dict):
            part["image_url"] = data[part["image_url"]["image_ref"]["sha256"]].decode("ascii")
    return item

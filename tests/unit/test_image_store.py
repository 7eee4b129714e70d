"""Where image bytes live (shared/image_store.py): a large data URI moves out of its Item into
chunks and comes back exactly; the Item handed in is never changed; an Item with nothing to move
out is stored as it is (no copy)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from shared import image_store

INLINE_MAX = 64
CHUNK = 16

uris = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=",
               max_size=200).map(lambda b64: "data:image/png;base64," + b64)
parts = st.one_of(
    st.builds(lambda t: {"type": "input_text", "text": t}, st.text(max_size=20)),
    st.builds(lambda u: {"type": "input_image", "image_url": u}, uris),
)


def message(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "message", "session_id": "s", "sequence": 1, "role": "user",
            "content": content}


def output(content: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "function_call_output", "session_id": "s", "sequence": 2, "call_id": "c",
            "output": content}


@given(st.lists(parts, max_size=6), st.sampled_from([message, output]))
def test_externalize_then_rehydrate_gives_the_item_back_and_leaves_it_unchanged(
        content: list[dict[str, Any]], shape: Any) -> None:
    item = shape(content)
    before = copy.deepcopy(item)
    stored, chunks = image_store.externalize(item, INLINE_MAX, CHUNK)
    assert item == before
    large = [p["image_url"] for p in content
             if p["type"] == "input_image" and len(p["image_url"]) > INLINE_MAX]
    if not large:
        assert stored is item and chunks == []
        return
    assert stored is not item
    data: dict[str, bytes] = {}
    for ref in image_store.refs(stored):
        mine = sorted((c for c in chunks if c["sha"] == ref["sha256"]), key=lambda c: c["n"])
        assert [c["n"] for c in mine] == list(range(ref["chunks"]))
        data[ref["sha256"]] = b"".join(c["data"] for c in mine)
        assert len(data[ref["sha256"]]) == ref["length"]
    assert image_store.rehydrate(copy.deepcopy(stored), data) == before


def test_a_verdict_item_is_stored_as_it_is() -> None:
    item = {"type": "function_call_application", "session_id": "s", "sequence": 3,
            "call_id": "c", "state": "uncertain", "reason": "no receipt"}
    stored, chunks = image_store.externalize(item, INLINE_MAX, CHUNK)
    assert stored is item and chunks == []

"""Where image bytes and long agent texts live (shared/image_store.py): a large data URI or an
agent text over the bound moves out of its Item into chunks and comes back exactly; the Item
handed in is never changed; an Item with nothing to move out is stored as it is (no copy); a
held agent message's long text moves out of the Session's state the same way."""

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
    # an agent's text: multi-byte characters, so a chunk boundary may fall inside one
    st.builds(lambda t: {"type": "output_text", "text": t}, st.text(max_size=60)),
)


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


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
    large += [p["text"] for p in content
              if p["type"] == "output_text" and _utf8(p["text"]) > INLINE_MAX]
    # a user's text stays inline whatever its size (admission bounds the stored form)
    assert [p for p in (stored["content"] if "content" in stored else stored["output"])
            if p["type"] == "input_text" and not isinstance(p["text"], str)] == []
    if not large:
        assert stored is item and chunks == []
        return
    assert stored is not item
    data: dict[str, bytes] = {}
    for ref in image_store.refs(stored):
        # the same content twice in one Item (two equal parts) gives the same chunks twice;
        # storage writes each (sha, n) once (``_dedupe``, duplicates ignored), so count them so
        by_n = {c["n"]: c for c in chunks if c["sha"] == ref["sha256"]}
        mine = [by_n[n] for n in sorted(by_n)]
        assert [c["n"] for c in mine] == list(range(ref["chunks"]))
        data[ref["sha256"]] = b"".join(c["data"] for c in mine)
        assert len(data[ref["sha256"]]) == ref["length"]
    assert image_store.rehydrate(copy.deepcopy(stored), data) == before


def test_a_verdict_item_is_stored_as_it_is() -> None:
    item = {"type": "function_call_application", "session_id": "s", "sequence": 3,
            "call_id": "c", "state": "uncertain", "reason": "no receipt"}
    stored, chunks = image_store.externalize(item, INLINE_MAX, CHUNK)
    assert stored is item and chunks == []


def test_a_long_agent_text_moves_out_and_comes_back_byte_for_byte() -> None:
    text = "  𝄞 an answer\n\n" * 20  # 4-byte characters: chunks cut inside them
    item = {"type": "message", "session_id": "s", "sequence": 4, "role": "agent",
            "content": [{"type": "output_text", "text": text}], "phase": "final_answer"}
    stored, chunks = image_store.externalize(item, INLINE_MAX, CHUNK)
    [ref] = image_store.refs(stored)
    assert stored["content"] == [{"type": "output_text", "text": {"text_ref": ref}}]
    assert ref["length"] == _utf8(text) and ref["chunks"] == len(chunks) > 1
    data = {ref["sha256"]: b"".join(c["data"] for c in sorted(chunks, key=lambda c: c["n"]))}
    assert image_store.rehydrate(copy.deepcopy(stored), data) == item
    # at the bound it stays inline
    short = {**item, "content": [{"type": "output_text", "text": "x" * INLINE_MAX}]}
    assert image_store.externalize(short, INLINE_MAX, CHUNK) == (short, [])


def test_a_held_agent_texts_state_keeps_a_reference_that_an_item_carries_back() -> None:
    """The Session's state holding a long unpublished agent message (``said``) is stored with a
    reference; an Item the domain makes from that reference is stored as it is (its chunks are
    there already) and made whole by ``rehydrate``."""
    text = "é" * (INLINE_MAX + 1)
    state = {"version": 3, "said": {"turn_id": "t1", "text": text}}
    stored, chunks = image_store.externalize_state(state, INLINE_MAX, CHUNK)
    assert stored is not None and state["said"]["text"] == text  # not changed
    ref = stored["said"]["text"]["text_ref"]
    assert ref["length"] == _utf8(text) and [c["n"] for c in chunks] == list(range(ref["chunks"]))
    item = {"type": "message", "session_id": "s", "sequence": 5, "role": "agent",
            "content": [{"type": "output_text", "text": stored["said"]["text"]}]}
    assert image_store.externalize(item, INLINE_MAX, CHUNK) == (item, [])
    data = {ref["sha256"]: b"".join(c["data"] for c in chunks)}
    whole = image_store.rehydrate(copy.deepcopy(item), data)
    assert whole["content"] == [{"type": "output_text", "text": text}]
    # nothing long held: the state as it is
    for small in ({"version": 1, "said": None}, {"version": 2, "said": {"turn_id": "t",
                                                                        "text": "hi"}}, None):
        assert image_store.externalize_state(small, INLINE_MAX, CHUNK) == (small, [])

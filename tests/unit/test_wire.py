"""Function-result conversion and delivery records (shared/domain/wire.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.domain.wire import (
    function_result_delivery,
    has_images,
    message_delivery,
    messages_have_images,
    result_content,
)

PNG = "data:image/png;base64,iVBORw0KGgo="
T = {"type": "input_text", "text": "a"}
I = {"type": "input_image", "image_url": PNG}  # noqa: E741


def txt(s: str) -> dict[str, str]:
    return {"type": "input_text", "text": s}


CASES: list[tuple[str, Any, Any, Any, list[dict[str, str]]]] = [
    # id, output, error, fields_present, expected content
    ("string output", "ok", None, None, [txt("ok")]),
    ("empty string output is one empty part", "", None, None, [txt("")]),
    ("whitespace output verbatim", " \n", None, None, [txt(" \n")]),
    ("parts output", [T, I], None, None, [T, I]),
    ("image first order kept", [I, T], None, None, [I, T]),
    ("null output, error", None, "boom", None, [txt("boom")]),
    ("string output then error", "partial", "boom", None, [txt("partial"), txt("boom")]),
    ("parts then error last", [I, T], "boom", None, [I, T, txt("boom")]),
    ("empty error is a string", None, "", None, [txt("")]),
    ("nothing", None, None, None, []),
    ("empty parts list", [], None, None, []),
    ("absent output ignored", "x", "boom", {"error"}, [txt("boom")]),
    ("absent error ignored", "x", "boom", {"output"}, [txt("x")]),
    ("present but null", None, None, {"output", "error"}, []),
    ("both present", [T], "e", {"output", "error"}, [T, txt("e")]),
]


@pytest.mark.parametrize(
    ("output", "error", "present", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_result_content(output: Any, error: Any, present: Any, expected: Any) -> None:
    before = copy.deepcopy((output, error))
    got = result_content(output, error, present)
    assert got == expected
    assert (output, error) == before  # the stored result is unchanged


def test_result_content_returns_new_objects() -> None:
    output = [{"type": "input_text", "text": "a"}, {"type": "input_image", "image_url": PNG}]
    stored = copy.deepcopy(output)
    got = result_content(output, "err", None)
    for part in got:
        assert all(part is not p for p in output)
    got[0]["text"] = "MUTATED"
    got[1]["image_url"] = "x"
    got.append(txt("more"))
    assert output == stored


def test_result_content_copies_unknown_parts_whole() -> None:
    # An unknown part type is copied whole, never stripped.
    odd = [{"type": "input_file", "file_id": "f"}]
    assert result_content(odd, None) == odd


@given(
    st.one_of(
        st.none(),
        st.text(),
        st.lists(st.sampled_from([T, I, txt(""), txt(" ")]), max_size=5),
    ),
    st.one_of(st.none(), st.text()),
)
def test_result_content_property(output: Any, error: Any) -> None:
    before = copy.deepcopy((output, error))
    got = result_content(output, error)
    expected_len = (0 if output is None else 1 if isinstance(output, str) else len(output)) + (
        0 if error is None else 1
    )
    assert len(got) == expected_len
    if error is not None:
        assert got[-1] == txt(error)
    if isinstance(output, list):
        assert got[: len(output)] == output
    assert (output, error) == before


@pytest.mark.parametrize(
    ("content", "expected"),
    [([], False), ([T], False), ([I], True), ([T, I], True), ([txt("data:image/png")], False)],
)
def test_has_images(content: Any, expected: bool) -> None:
    assert has_images(content) is expected
    assert messages_have_images([{"role": "user", "content": content}]) is expected


def test_message_delivery_shape_and_copy() -> None:
    stored = [
        {"role": "user", "type": "message", "content": [T, I]},
        {"role": "user", "content": [T]},
    ]
    before = copy.deepcopy(stored)
    d = message_delivery(
        delivery_id="dlv_1",
        runtime_id="rt_1",
        session_id="session_1",
        turn_id="turn_1",
        kind="steer",
        messages=stored,
    )
    assert d == {
        "schema": "runtime.delivery/1",
        "delivery_id": "dlv_1",
        "runtime_id": "rt_1",
        "session_id": "session_1",
        "turn_id": "turn_1",
        "kind": "steer",
        "messages": [{"role": "user", "content": [T, I]}, {"role": "user", "content": [T]}],
    }
    d["messages"][0]["content"][0]["text"] = "MUTATED"
    assert stored == before


def test_function_result_delivery_shape() -> None:
    d = function_result_delivery(
        delivery_id="dlv_1",
        runtime_id="rt_1",
        session_id="session_1",
        turn_id="turn_1",
        call_id="call_1",
        name="lookup",
        success=False,
        output=[I],
        error="bad",
        fields_present={"output", "error"},
    )
    assert d["kind"] == "function_result"
    assert d["success"] is False
    assert d["call_id"] == "call_1" and d["name"] == "lookup"
    assert d["content"] == [I, txt("bad")]

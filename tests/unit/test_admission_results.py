"""Function results (``agent.session.input.tool_result``): shape rules, presence of output/error,
retry identity. The per-harness rows are in test_harness_tables.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from services.admission.domain.validation import AdmittedToolResult, Limits, validate_event
from shared.domain.errors import ApiError
from tests.support.builders import PNG_URI, assert_error, image, text, tool_result

INVALID = (400, "invalid_request")


def submit(body: object, harness: str = "codex", limits: Limits | None = None) -> object:
    return validate_event(body, harness, "none", limits or Limits())


def admitted(body: object) -> AdmittedToolResult:
    result = submit(body)
    assert isinstance(result, AdmittedToolResult), result
    return result


BASE = tool_result(True)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({k: v for k, v in BASE.items() if k != "call_id"}, "call_id"),
        ({**BASE, "call_id": ""}, "call_id"),
        ({**BASE, "call_id": None}, "call_id"),
        ({**BASE, "call_id": 17}, "call_id"),
        ({**BASE, "call_id": "c" * 256}, "call_id"),
        ({k: v for k, v in BASE.items() if k != "success"}, "success"),
        ({**BASE, "success": None}, "success"),
        ({**BASE, "success": "true"}, "success"),
        ({**BASE, "success": 1}, "success"),
        ({**BASE, "success": 0}, "success"),
        ({**BASE, "output": 42}, "output"),
        ({**BASE, "output": True}, "output"),
        ({**BASE, "output": {"type": "input_text", "text": "x"}}, "output"),
        ({**BASE, "output": []}, "output"),
        ({**BASE, "output": ["plain string part"]}, "output[0]"),
        ({**BASE, "output": [text("a"), {"type": "text", "text": "b"}]}, "output[1].type"),
        ({**BASE, "output": [{"type": "input_text", "text": 3}]}, "output[0].text"),
        ({**BASE, "output": [{**text("a"), "extra": 1}]}, "output[0].extra"),
        ({**BASE, "output": [{**image(), "detail": "high"}]}, "output[0].detail"),
        ({**BASE, "output": [image("data:image/png;base64,iVBO\n")]}, "output[0].image_url"),
        ({**BASE, "output": "\ud800"}, "output"),
        ({**BASE, "error": 500}, "error"),
        ({**BASE, "error": ["boom"]}, "error"),
        ({**BASE, "error": {"message": "boom"}}, "error"),
        ({**BASE, "error": "\udfff"}, "error"),
        ({**BASE, "input": [text("x")]}, "input"),
        ({**BASE, "name": "fn"}, "name"),
        ({**BASE, "is_error": True}, "is_error"),
        ({**BASE, "client_event_id": ""}, "client_event_id"),
        ({**BASE, "metadata": [1]}, "metadata"),
    ],
)
def test_bad_tool_result(body: Any, param: str) -> None:
    assert_error(submit(body), *INVALID, param)


def test_output_part_count_and_image_count_limits() -> None:
    parts = Limits(max_parts_per_message=2)
    assert_error(
        submit({**BASE, "output": [text("a"), text("b"), text("c")]}, limits=parts),
        *INVALID,
        "output[2]",
    )
    imgs = Limits(max_images_per_request=1)
    assert_error(
        submit({**BASE, "output": [image(), text("x"), image()]}, limits=imgs),
        *INVALID,
        "output[2]",
    )


@pytest.mark.parametrize(
    ("fields", "present"),
    [
        ({}, ()),
        ({"output": None}, ("output",)),
        ({"error": None}, ("error",)),
        ({"output": "x", "error": None}, ("output", "error")),
        ({"error": "e", "output": [text("x")]}, ("error", "output")),
    ],
)
def test_fields_present_records_presence_in_sent_order(
    fields: dict[str, Any], present: tuple[str, ...]
) -> None:
    result = admitted(tool_result(False, **fields))
    assert result.fields_present == present
    rec = result.record()
    # the record always carries both fields (null when absent) plus what was present
    assert rec["output"] == fields.get("output") and rec["error"] == fields.get("error")
    assert rec["fields_present"] == list(present)
    assert list(result.submission()) == ["call_id", "success", *present]


def test_identity_distinguishes_absent_from_null_and_ignores_envelope() -> None:
    absent = admitted(tool_result(True))
    null = admitted(tool_result(True, output=None))
    assert absent.identity() != null.identity()
    same = admitted({**tool_result(True, output=None), "client_event_id": "e2", "tags": ["x"]})
    assert same.identity() == null.identity()
    # key order of the body does not change identity
    a = admitted(tool_result(True, output="o", error="e"))
    b = admitted({"error": "e", "output": "o", **tool_result(True)})
    assert a.identity() == b.identity()
    assert admitted(tool_result(False, output="o", error="e")).identity() != a.identity()


def test_output_is_kept_exactly_and_copied() -> None:
    output = [text(""), image(PNG_URI), text("  untrimmed ")]
    body = tool_result(True, output=output)
    sent = json.dumps(output)
    result = admitted(body)
    output[1]["image_url"] = "changed"
    assert json.dumps(result.output) == sent and result.has_images and result.image_count == 1
    assert json.dumps(result.record()["output"]) == sent


def test_string_output_and_success_with_error_are_stored_as_sent() -> None:
    result = admitted(tool_result(True, output="", error="warning"))
    assert (result.output, result.error, result.success) == ("", "warning", True)
    assert not isinstance(submit(tool_result(False)), ApiError)

"""Admission's 413 for an input whose stored form the store could not hold
(``services.admission.core.stored_form_too_large``): the admitted record, as JSON and as BSON,
within ``STORED_FORM_MAX_BYTES`` — the store's 16 MiB document less room for the fields stored
with it."""

from __future__ import annotations

from typing import Any

import bson

from services.admission.core import stored_form_too_large
from shared.kafka import encode
from shared.settings import STORE_DOCUMENT_BYTES, STORED_FORM_MAX_BYTES, Settings


def _record(text_bytes: int, **extra: Any) -> dict[str, Any]:
    return {"schema": "session.admitted/1", "op": "sessions.create",
            "session_id": "session_" + "a" * 32, "request_id": "req_" + "b" * 32,
            "messages": [{"role": "user", "content": [
                {"type": "input_text", "text": "x" * text_bytes}]}], **extra}


def _size(rec: dict[str, Any]) -> int:
    return max(len(encode(rec)), len(bson.encode(rec)))


def _fitting(limit: int) -> dict[str, Any]:
    """A record whose larger form (JSON or BSON) is exactly ``limit`` bytes."""
    return _record(limit - _size(_record(0)))


def test_the_largest_record_that_fits_is_admitted_and_one_byte_more_is_413() -> None:
    rec = _fitting(STORED_FORM_MAX_BYTES)
    assert _size(rec) == STORED_FORM_MAX_BYTES
    assert stored_form_too_large(rec, len(encode(rec))) is None
    over = _fitting(STORED_FORM_MAX_BYTES + 1)
    err = stored_form_too_large(over, len(encode(over)))
    assert err is not None and err.status == 413 and err.type == "request_too_large"
    assert err.param == "input"
    assert str(STORED_FORM_MAX_BYTES) in err.message


def test_a_function_result_names_its_output() -> None:
    rec = {**_fitting(STORED_FORM_MAX_BYTES + 10), "submission": {"success": True}}
    err = stored_form_too_large(rec, len(encode(rec)))
    assert err is not None and err.param == "output"


def test_bson_is_measured_too_when_its_framing_makes_it_larger_than_the_json() -> None:
    # many empty parts: ~30 bytes each as JSON, ~45 as BSON (type bytes, array keys, lengths)
    parts = [{"type": "input_text", "text": ""}] * 450_000
    rec = {"messages": [{"role": "user", "content": parts}]}
    json_bytes = len(encode(rec))
    assert json_bytes < STORED_FORM_MAX_BYTES < len(bson.encode(rec))
    err = stored_form_too_large(rec, json_bytes)
    assert err is not None and err.status == 413


def test_the_body_limit_is_at_most_the_store_document() -> None:
    assert Settings().max_body_bytes == STORE_DOCUMENT_BYTES
    import pydantic
    try:
        Settings(max_body_bytes=STORE_DOCUMENT_BYTES + 1)
    except pydantic.ValidationError as exc:
        assert "max_body_bytes" in str(exc)
    else:
        raise AssertionError("a body limit the store cannot hold was accepted")


def test_a_record_larger_than_the_topics_take_is_413_too() -> None:
    """A deployment with a small body limit has small topic records (2 × the body + 1 MiB): an
    input whose record outgrows them is refused, not a failed hand-over."""
    from services.admission.core import RECORD_ROOM
    from shared.kafka import max_record_bytes

    record_max = max_record_bytes(Settings(max_body_bytes=256 * 1024)) - RECORD_ROOM
    envelope = len(encode(_record(0)))
    fits, over = _record(record_max - envelope), _record(record_max + 1 - envelope)
    assert len(encode(over)) == record_max + 1
    assert stored_form_too_large(fits, len(encode(fits)), record_max) is None
    err = stored_form_too_large(over, len(encode(over)), record_max)
    assert err is not None and err.status == 413 and err.param == "input"
    assert f"at most {record_max} bytes" in err.message

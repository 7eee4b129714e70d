"""Retries (``shared.domain.idempotency``): the one rule admission and storage both answer by,
and the ``session.admitted/1`` records the domain builds (keys in the order on the topic)."""

from __future__ import annotations

from typing import Any

from services.admission.domain.validation import (
    AdmittedCreate,
    AdmittedMessageEvent,
    AdmittedToolResult,
    Limits,
    Stamp,
    validate_create,
    validate_event,
)
from shared.domain import idempotency
from shared.domain.errors import ApiError
from tests.support.builders import create_body, msg, text, tool_result

STAMP = Stamp("req_1", "session_1", "evt_1", "2026-01-01T00:00:00Z", "fp", "t1")
HEAD = ["schema", "op", "request_id", "session_id", "event_id", "admitted_at", "fingerprint"]
ENVELOPE = ["metadata", "tags", "external_actor", "has_images"]


def test_identical_repeat_replays_the_stored_answer() -> None:
    prior = {"fingerprint": "a", "body": {"id": "s", "delivery": "started"}, "item_keys": ["k"]}
    got = idempotency.repeat(prior, "a", "event")
    assert isinstance(got, idempotency.Replay)
    assert (got.status, got.body, got.item_keys, got.replayed) == (
        202, {"id": "s", "delivery": "duplicate"}, ["k"], True)
    assert prior["body"]["delivery"] == "started"  # the stored answer is not touched
    created = idempotency.repeat({"fingerprint": "a", "body": {"id": "s"}}, "a", "create")
    assert isinstance(created, idempotency.Replay)
    assert (created.status, created.body, created.item_keys) == (201, {"id": "s"}, [])


def test_different_request_under_one_id_is_409_naming_the_id() -> None:
    for op, param in (("create", "client_request_id"), ("event", "client_event_id")):
        got = idempotency.repeat({"fingerprint": "a", "body": {}}, "b", op)  # type: ignore[arg-type]
        assert isinstance(got, ApiError)
        assert got.status == 409 and got.param == param
        assert got.message == "a different request under this idempotency id is already stored"


def test_function_result_repeats() -> None:
    unknown = idempotency.result_repeat(None, "x")
    assert isinstance(unknown, ApiError) and (unknown.status, unknown.param) == (404, "call_id")
    assert idempotency.result_repeat({"submission": None}, "x") is None
    call: dict[str, Any] = {"submission": {"success": True}, "fingerprint": "x",
                            "answer": {"delivery": "resumed"}, "output_item_key": "s/3"}
    same = idempotency.result_repeat(call, "x")
    assert isinstance(same, idempotency.Replay)
    assert (same.status, same.body, same.item_keys, same.replayed) == (
        202, {"delivery": "duplicate"}, ["s/3"], False)
    other = idempotency.result_repeat(call, "y")
    assert isinstance(other, ApiError) and (other.status, other.param) == (409, "call_id")
    assert other.message == "a different result for this call is already stored"


def test_create_fingerprint_leaves_stream_out() -> None:
    body = create_body("hi")
    assert (idempotency.request_fingerprint({**body, "stream": True}, "create")
            == idempotency.request_fingerprint(body, "create"))
    assert (idempotency.request_fingerprint({**body, "stream": True}, "event")
            != idempotency.request_fingerprint(body, "event"))


def test_admitted_records_in_topic_order() -> None:
    create = validate_create(create_body("hi", client_request_id="c1"), Limits())
    assert isinstance(create, AdmittedCreate)
    rec = create.admitted_record(STAMP)
    assert list(rec) == [*HEAD, "harness", "placement", "input_was_string", "stream",
                         "client_request_id", *ENVELOPE, "messages", "tenant"]
    assert rec["op"] == "sessions.create" and rec["messages"] == create.record()["input"]

    message = validate_event({"type": "agent.session.input.message", "input": [msg(text("x"))]},
                             "codex", "none", Limits())
    assert isinstance(message, AdmittedMessageEvent)
    assert list(message.admitted_record(STAMP)) == [
        *HEAD, "client_event_id", *ENVELOPE, "event_type", "messages", "tenant"]

    result = validate_event(tool_result(True, output="o"), "codex", "none", Limits())
    assert isinstance(result, AdmittedToolResult)
    rec = result.admitted_record(STAMP)
    assert list(rec) == [*HEAD, "call_id", "fields_present", "client_event_id", *ENVELOPE,
                         "event_type", "submission", "tenant", "submission_fingerprint"]
    assert rec["submission"] == {"call_id": "call_1", "success": True, "output": "o"}
    assert rec["submission_fingerprint"] == idempotency.fingerprint(rec["submission"])

"""The one decoder of the records admission and storage consume (shared.messages.decode): a record
that is not its topic's model is poison with the validation's reason; a valid one comes out
typed, with its content exactly as it was on the wire."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import records
from shared.domain.poison import INVALID_FIELDS, NO_SCHEMA, UNDECODABLE, UNEXPECTED_SCHEMA, Poison
from shared.kafka import dlq_envelope
from shared.messages import decode, internal
from shared.service import decode_records

SID = "session_" + "a" * 32


def _admitted(**extra: Any) -> dict[str, Any]:
    return {"schema": records.ADMITTED, "op": records.OP_EVENT, "request_id": "req_1",
            "session_id": SID, "event_id": "evt_1", "fingerprint": "fp",
            "event_type": records.EV_MESSAGE, **extra}


@pytest.mark.parametrize(("raw", "code", "reason"), [
    (b"\xff{", UNDECODABLE, "not UTF-8 JSON"),
    (b'{"schema": NaN}', UNDECODABLE, "NaN is not JSON"),
    (b"[1]", UNDECODABLE, "not a JSON object"),
    (b'{"request_id": "r"}', NO_SCHEMA, "no string 'schema'"),
    (b'{"schema": "core.fact/1"}', UNEXPECTED_SCHEMA, "core.fact/1"),
    (json.dumps(_admitted(request_id=7)).encode(), INVALID_FIELDS,
     "events.create.request_id: Input should be a valid string"),
    (json.dumps(_admitted(op="sessions.delete")).encode(), INVALID_FIELDS, "op"),
    (json.dumps({k: v for k, v in _admitted().items() if k != "event_type"}).encode(),
     INVALID_FIELDS, "event_type: Field required"),
])
def test_what_is_not_the_model_is_poison_with_the_reason(raw: bytes, code: str,
                                                         reason: str) -> None:
    got = decode.ADMITTED.decode(raw)
    assert isinstance(got, Poison)
    assert got.code == code
    assert reason in got.detail, got.detail


def test_types_are_strict() -> None:
    reply = {"schema": records.STORAGE_REPLY, "request_id": "r", "body": {}}
    for status in (True, "201", 201.5):
        got = decode.STORAGE_REPLY.decode(json.dumps({**reply, "status": status}).encode())
        assert isinstance(got, Poison) and got.code == INVALID_FIELDS, status
    ok = decode.STORAGE_REPLY.decode(json.dumps({**reply, "status": 201}).encode())
    assert not isinstance(ok, Poison) and ok.model.status == 201


def test_content_comes_out_exactly_as_it_went_in() -> None:
    """Key order, big integers, floats, nested arrays, unknown fields: the decoded value is the
    wire's JSON, and re-encoding it gives the same bytes."""
    content = [{"type": "input_text", "text": "  héllo\u2028 "},
               {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]
    rec = _admitted(messages=[{"role": "user", "content": content}],
                    metadata={"z": 1, "a": [12345678901234567890, 1.0, -0.0, [[]]]},
                    future_field={"kept": True})
    raw = json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode()
    got = decode.ADMITTED.decode(raw)
    assert not isinstance(got, Poison)
    assert isinstance(got.model, internal.AdmittedEvent)
    assert got.model.session_id == SID and got.model.event_type == records.EV_MESSAGE
    assert json.dumps(got.value, ensure_ascii=False, separators=(",", ":")).encode() == raw
    assert list(got.value) == list(rec)


async def test_a_batch_sends_poison_to_the_dlq_and_goes_on() -> None:
    sent: list[tuple[str, dict[str, Any]]] = []

    class Dlq:
        async def record(self, r: Any, poison: Poison) -> None:
            sent.append((r.topic, dlq_envelope(r.topic, r.value, poison, key=r.key,
                                               partition=r.partition, offset=r.offset)))

    class Raw:
        def __init__(self, topic: str, value: bytes, offset: int) -> None:
            self.topic, self.value, self.offset = topic, value, offset
            self.key, self.partition = SID.encode(), 0

    fact = {"schema": records.FACT, "fact_id": "f1", "session_id": SID, "kind": "turn"}
    raws = (Raw("t.facts", json.dumps(fact).encode(), 0),
            Raw("t.facts", json.dumps({**fact, "kind": None}).encode(), 1),
            Raw("t.other", json.dumps(fact).encode(), 2))
    out = await decode_records(Dlq(), raws, {"t.facts": decode.FACT})  # type: ignore[arg-type]
    assert [(r.offset, d.model.fact_id) for r, d in out] == [(0, "f1")]
    assert [(t, e["reason"]) for t, e in sent] == [("t.facts", INVALID_FIELDS),
                                                   ("t.other", UNEXPECTED_SCHEMA)]
    assert "kind: Input should be a valid string" in sent[0][1]["detail"]


# ---- the records the dispatcher and the reference Runtime consume -------------------------
RT = "rt_" + "b" * 32
MESSAGES = [{"role": "user", "content": [{"type": "input_text", "text": " x "},
                                         {"type": "input_image", "image_url": "data:,"}]}]
GOOD: dict[str, tuple[decode.RecordType[Any], dict[str, Any]]] = {
    "stored_messages": (decode.STORED, {
        "schema": records.STORED, "session_id": SID, "event_id": "evt_1", "harness": "codex",
        "placement": "none", "kind": "start", "turn_id": "turn_1", "messages": MESSAGES,
        "has_images": True, "item_ids": ["item_1"]}),
    "stored_result": (decode.STORED, {
        "schema": records.STORED, "session_id": SID, "event_id": "evt_2", "harness": "codex",
        "placement": "none", "kind": "function_result", "turn_id": None, "call_id": "call_1",
        "name": "f", "submission": {"call_id": "call_1", "success": False, "output": [],
                                    "error": ""},
        "fields_present": ["output", "error"]}),
    "registration": (decode.REGISTRATION, {
        "schema": records.REGISTRATION, "runtime_id": RT, "harness": "claude_code",
        "bridge_protocol": 3, "placements": ["none"], "status": "ready",
        "capabilities": {"message_images": True, "function_result_images": False},
        "heartbeat_at": "2026-11-30T10:00:00+01:00"}),
    "delivery": (decode.DELIVERY, {
        "schema": records.DELIVERY, "delivery_id": "dlv_1", "runtime_id": RT,
        "session_id": SID, "turn_id": "turn_1", "kind": "function_result", "call_id": "c",
        "name": "f", "success": True, "content": []}),
    "control": (decode.CONTROL, {
        "schema": records.CONTROL, "runtime_id": RT, "set": {"replay": True}}),
    "observation": (decode.OBSERVATION, {
        "schema": records.OBSERVATION, "runtime_id": RT, "session_id": SID, "harness": "codex",
        "observed_at": "2026-11-30T10:00:00Z", "native": None,
        "refusal": {"delivery_id": "dlv_1", "code": "turn_ended"}}),
}
# (record, field, a wrong value, what the reason says)
WRONG = [
    ("stored_messages", "turn_id", 7, "turn_id: Input should be a valid string"),
    ("stored_messages", "messages", [{"role": "user", "content": "text"}],
     "messages.0.content: Input should be a valid list"),
    ("stored_messages", "has_images", 1, "has_images: Input should be a valid boolean"),
    ("stored_messages", "kind", "resume", "does not match any of the expected tags"),
    ("stored_result", "submission", {"success": "yes"},
     "submission.success: Input should be a valid boolean"),
    ("stored_result", "call_id", None, "call_id: Input should be a valid string"),
    ("registration", "status", "exploded", "status: Input should be 'ready', 'draining'"),
    ("registration", "placements", ["none", 3], "placements.1: Input should be 'none'"),
    ("registration", "harness", "gemini", "harness: Input should be 'codex'"),
    ("registration", "bridge_protocol", "3", "bridge_protocol: Input should be a valid integer"),
    ("registration", "heartbeat_at", "2026-11-30T10:00:00", "timestamp without a time zone"),
    ("delivery", "success", None, "function_result.success: Input should be a valid boolean"),
    ("delivery", "call_id", 7, "function_result.call_id: Input should be a valid string"),
    ("delivery", "runtime_id", 1, "runtime_id: Input should be a valid string"),
    ("control", "set", "everything", "set: Input should be a valid dictionary"),
    ("observation", "refusal", "no", "refusal: Input should be a valid dictionary"),
]


@pytest.mark.parametrize(("name", "field", "value", "reason"), WRONG)
def test_a_wrong_typed_field_is_refused_with_the_reason(name: str, field: str, value: Any,
                                                        reason: str) -> None:
    kind, good = GOOD[name]
    got = kind.decode(json.dumps({**good, field: value}).encode())
    assert isinstance(got, Poison) and got.code == INVALID_FIELDS
    assert got.detail.startswith(good["schema"]) and reason in got.detail, got.detail


@pytest.mark.parametrize("name", sorted(GOOD))
def test_unknown_fields_and_content_are_kept_exactly(name: str) -> None:
    kind, good = GOOD[name]
    rec = {**good, "from_a_newer_producer": {"n": 12345678901234567890, "f": -0.0}}
    raw = json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode()
    got = kind.decode(raw)
    assert not isinstance(got, Poison), got
    assert got.value == rec and list(got.value) == list(rec)
    assert json.dumps(got.value, ensure_ascii=False, separators=(",", ":")).encode() == raw
    assert got.model.model_extra["from_a_newer_producer"] == rec["from_a_newer_producer"]


def test_a_delivery_of_an_unknown_kind_reaches_the_runtime() -> None:
    """The Runtime refuses it with a refusal observation (Core then learns why the Turn fails);
    the DLQ would leave Core waiting."""
    _, good = GOOD["delivery"]
    got = decode.DELIVERY.decode(json.dumps({**good, "kind": "resume"}).encode())
    assert not isinstance(got, Poison) and got.model.kind == "resume"

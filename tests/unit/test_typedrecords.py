"""The one decoder of the records admission and storage consume (shared.typedrecords): a record
that is not its topic's model is poison with the validation's reason; a valid one comes out
typed, with its content exactly as it was on the wire."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import records, typedrecords
from shared.domain.poison import INVALID_FIELDS, NO_SCHEMA, UNDECODABLE, UNEXPECTED_SCHEMA, Poison
from shared.kafka import dlq_envelope
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
    got = typedrecords.ADMITTED.decode(raw)
    assert isinstance(got, Poison)
    assert got.code == code
    assert reason in got.detail, got.detail


def test_types_are_strict() -> None:
    reply = {"schema": records.STORAGE_REPLY, "request_id": "r", "body": {}}
    for status in (True, "201", 201.5):
        got = typedrecords.STORAGE_REPLY.decode(json.dumps({**reply, "status": status}).encode())
        assert isinstance(got, Poison) and got.code == INVALID_FIELDS, status
    ok = typedrecords.STORAGE_REPLY.decode(json.dumps({**reply, "status": 201}).encode())
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
    got = typedrecords.ADMITTED.decode(raw)
    assert not isinstance(got, Poison)
    assert isinstance(got.model, typedrecords.AdmittedEvent)
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
    out = await decode_records(Dlq(), raws, {"t.facts": typedrecords.FACT})  # type: ignore[arg-type]
    assert [(r.offset, d.model.fact_id) for r, d in out] == [(0, "f1")]
    assert [(t, e["reason"]) for t, e in sent] == [("t.facts", INVALID_FIELDS),
                                                   ("t.other", UNEXPECTED_SCHEMA)]
    assert "kind: Input should be a valid string" in sent[0][1]["detail"]

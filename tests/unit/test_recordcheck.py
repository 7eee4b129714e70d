"""Which records a consumer accepts from its topic (shared.domain.recordcheck): everything else
is poison, with a reason code for the metric label."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import records
from shared.domain.recordcheck import (
    INVALID_FIELDS,
    NO_SCHEMA,
    REQUIRED,
    UNDECODABLE,
    UNEXPECTED_SCHEMA,
    Poison,
    accept,
)

SID = "session_" + "a" * 32
GOOD: dict[str, dict[str, Any]] = {
    records.ADMITTED: {"schema": records.ADMITTED, "request_id": "req_1", "session_id": SID,
                       "op": records.OP_CREATE, "event_id": "evt_1", "fingerprint": "f"},
    records.FACT: {"schema": records.FACT, "fact_id": "f1", "session_id": SID, "kind": "turn"},
    records.OBSERVATION: {"schema": records.OBSERVATION, "runtime_id": "rt_1",
                          "session_id": SID, "harness": "codex", "native": {}},
    records.STORED: {"schema": records.STORED, "session_id": SID, "event_id": "evt_1",
                     "harness": "codex", "placement": "none", "kind": "start"},
    records.DELIVERY: {"schema": records.DELIVERY, "delivery_id": "d", "runtime_id": "rt_1",
                       "session_id": SID, "kind": "start"},
    records.REGISTRATION: {"schema": records.REGISTRATION, "runtime_id": "rt_1",
                           "harness": "codex", "status": "ready", "placements": ["none"],
                           "heartbeat_at": "2026-01-01T00:00:00Z"},
    records.CONTROL: {"schema": records.CONTROL, "runtime_id": "rt_1", "set": {}},
    records.ITEM: {"schema": records.ITEM, "id": "item_1", "session_id": SID, "sequence": 1,
                   "type": "message"},
    records.STORAGE_REPLY: {"schema": records.STORAGE_REPLY, "request_id": "req_1",
                            "status": 201, "body": {}},
}


def _raw(v: Any) -> bytes:
    return json.dumps(v).encode()


@pytest.mark.parametrize("schema", sorted(GOOD))
def test_good_records_are_accepted(schema: str) -> None:
    assert accept(_raw(GOOD[schema]), frozenset({schema})) == GOOD[schema]


@pytest.mark.parametrize("schema", sorted(GOOD))
def test_every_required_field_missing_or_mistyped_is_poison(schema: str) -> None:
    good = GOOD[schema]
    assert set(REQUIRED[schema]) <= set(good)
    for name in REQUIRED[schema]:
        missing = {k: v for k, v in good.items() if k != name}
        got = accept(_raw(missing), frozenset({schema}))
        assert isinstance(got, Poison) and got.code == INVALID_FIELDS, (schema, name)
        assert name in got.detail
        # a list is never a string, number, object or bool here (placements is a list: use 1)
        wrong = {**good, name: 1 if isinstance(good[name], list) else [1]}
        got = accept(_raw(wrong), frozenset({schema}))
        assert isinstance(got, Poison) and got.code == INVALID_FIELDS, (schema, name)


@pytest.mark.parametrize(("raw", "code"), [
    (b"\xff\xfe not utf-8", UNDECODABLE),
    (b"{not json", UNDECODABLE),
    (b'{"schema": "runtime.control/1", "x": NaN}', UNDECODABLE),
    (b"[1, 2]", UNDECODABLE),
    (b'"a string"', UNDECODABLE),
    (b"[" * 5000 + b"]" * 5000, UNDECODABLE),
    (b"{}", NO_SCHEMA),
    (b'{"schema": 1}', NO_SCHEMA),
    (b'{"schema": "session.item/1"}', UNEXPECTED_SCHEMA),
])
def test_undecodable_and_schemaless_records_are_poison(raw: bytes, code: str) -> None:
    got = accept(raw, frozenset({records.CONTROL}))
    assert isinstance(got, Poison) and got.code == code


def test_true_is_not_a_number_and_conditional_fields_apply() -> None:
    item = {**GOOD[records.ITEM], "sequence": True}
    got = accept(_raw(item), frozenset({records.ITEM}))
    assert isinstance(got, Poison) and "sequence" in got.detail
    result = {**GOOD[records.DELIVERY], "kind": "function_result"}
    got = accept(_raw(result), frozenset({records.DELIVERY}))
    assert isinstance(got, Poison) and "call_id" in got.detail
    ok = {**result, "call_id": "c1", "success": True}
    assert accept(_raw(ok), frozenset({records.DELIVERY})) == ok
    event = {**GOOD[records.ADMITTED], "op": records.OP_EVENT}
    got = accept(_raw(event), frozenset({records.ADMITTED}))
    assert isinstance(got, Poison) and "event_type" in got.detail


def test_observation_optional_fields_are_typed_when_present() -> None:
    obs = GOOD[records.OBSERVATION]
    assert accept(_raw({**obs, "native": None}), frozenset({records.OBSERVATION})) is not None
    got = accept(_raw({**obs, "native": "text"}), frozenset({records.OBSERVATION}))
    assert isinstance(got, Poison) and got.code == INVALID_FIELDS

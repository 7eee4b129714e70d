"""Which records the receipt tracker accepts from its topics (``runtime.deliveries`` and
``runtime.observations``, decoded with ``shared.messages.decode`` like every other consumer):
everything else is poison, with a reason code for the metric label."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from deploy.local.stack import free_port
from shared import records
from shared.domain.poison import (
    INVALID_FIELDS,
    NO_SCHEMA,
    UNDECODABLE,
    UNEXPECTED_SCHEMA,
    Poison,
)
from shared.health import serve_health
from shared.kafka import DLQ_RECORDS, dlq_envelope
from shared.messages import decode

SID = "session_" + "a" * 32
GOOD: dict[str, dict[str, Any]] = {
    records.OBSERVATION: {"schema": records.OBSERVATION, "runtime_id": "rt_1",
                          "session_id": SID, "harness": "codex",
                          "observed_at": "2026-11-30T10:00:00Z", "native": {}},
    records.DELIVERY: {"schema": records.DELIVERY, "delivery_id": "d", "runtime_id": "rt_1",
                       "session_id": SID, "turn_id": "turn_1", "kind": "start",
                       "messages": []},
}


TYPES = {records.OBSERVATION: decode.OBSERVATION, records.DELIVERY: decode.DELIVERY,
         records.CONTROL: decode.CONTROL}
# every field the contract requires (CONTRACT §2): a record without one is poison
REQUIRED = {records.OBSERVATION: ("runtime_id", "session_id", "harness", "observed_at", "native"),
            records.DELIVERY: ("delivery_id", "runtime_id", "session_id", "turn_id", "kind",
                               "messages")}


def _raw(v: Any) -> bytes:
    return json.dumps(v).encode()


def accept(raw: bytes, schemas: frozenset[str]) -> Any:
    """The decoded record as the tracker hands it on, or the poison."""
    (schema,) = schemas
    got = TYPES[schema].decode(raw)
    return got if isinstance(got, Poison) else got.value


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


def test_conditional_fields_apply_and_are_typed() -> None:
    result = {**GOOD[records.DELIVERY], "kind": "function_result"}
    got = accept(_raw(result), frozenset({records.DELIVERY}))
    assert isinstance(got, Poison) and "call_id" in got.detail
    ok = {**result, "call_id": "c1", "name": "f", "success": True, "content": []}
    assert accept(_raw(ok), frozenset({records.DELIVERY})) == ok
    got = accept(_raw({**ok, "success": 1}), frozenset({records.DELIVERY}))
    assert isinstance(got, Poison) and "success" in got.detail


def test_observation_optional_fields_are_typed_when_present() -> None:
    obs = GOOD[records.OBSERVATION]
    assert accept(_raw({**obs, "native": None}), frozenset({records.OBSERVATION})) is not None
    got = accept(_raw({**obs, "native": "text"}), frozenset({records.OBSERVATION}))
    assert isinstance(got, Poison) and got.code == INVALID_FIELDS


def test_dlq_envelope_keeps_bytes_that_are_not_utf8() -> None:
    raw, key = b"\xff\x00\xfe", b"\x80k"
    env = dlq_envelope("a.topic", raw, Poison("undecodable", "x"), key=key, partition=3,
                       offset=9)
    assert base64.b64decode(env["value_b64"]) == raw and base64.b64decode(env["key_b64"]) == key
    assert (env["partition"], env["offset"], env["reason"]) == (3, 9, "undecodable")
    assert env["source_topic"] == "a.topic" and env["detail"] == "x"
    json.dumps(env)  # the envelope itself is JSON


async def test_health_server_serves_prometheus_metrics() -> None:
    DLQ_RECORDS.labels("probe.topic", "undecodable").inc()

    async def ready() -> bool:
        return True

    port = free_port()
    server = await serve_health(port, ready)
    assert server is not None
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        await writer.drain()
        data = await reader.read()
        writer.close()
    finally:
        await server.stop()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"text/plain" in head
    assert b'session_core_dlq_records_total{reason="undecodable",topic="probe.topic"}' in body



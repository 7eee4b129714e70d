"""A consumer written only from the published contracts (``docs/schemas/*.json`` and
``docs/asyncapi.json``, read with ``jsonschema``; no project code) validates every record the e2e
flow produced on the public topics — Items, input results, registrations, deliveries,
observations — value, headers and key; and a poison record's DLQ record the same way."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from jsonschema import Draft202012Validator

from tests.support.builders import image, msg, png_data_uri, text
from tests.support.processes import Core

pytestmark = pytest.mark.e2e

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
ASYNCAPI = json.loads((SCHEMAS.parent / "asyncapi.json").read_text())
PUBLIC = ("session.items", "session.input.results", "runtime.registrations",
          "runtime.deliveries", "runtime.observations")
# the field of the value each topic's records are keyed by (the AsyncAPI key binding names it)
KEYED_BY = {"session.items": "session_id", "session.input.results": "request_id",
            "runtime.registrations": "runtime_id", "runtime.deliveries": "runtime_id",
            "runtime.observations": "session_id"}


def validator(topic: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((SCHEMAS / f"{topic}.json").read_text()))


def message_of(address: str) -> dict[str, Any]:
    """The AsyncAPI message of the channel at ``address``."""
    (channel,) = [c for c in ASYNCAPI["channels"].values() if c["address"] == address]
    (ref,) = channel["messages"].values()
    message: dict[str, Any] = ASYNCAPI["components"]["messages"][ref["$ref"].rsplit("/", 1)[1]]
    return message


def wire_errors(address: str, records: list[Any]) -> list[str]:
    """Each record's headers against its message's ``headers`` schema: every header sent is
    declared, every required one sent; ``correlationId`` only where its header is declared."""
    message = message_of(address)
    schema = message["headers"]
    headers = Draft202012Validator({**schema, "additionalProperties": False})
    out = []
    for r in records:
        sent = {k: v.decode() for k, v in r.headers}
        out += [f"headers {sent}: {e.message}" for e in headers.iter_errors(sent)]
    assert message["bindings"]["kafka"]["key"]["type"] == "string"
    if ("correlation_id" in schema["properties"]) != ("correlationId" in message):
        out.append("correlationId declared without its header (or the reverse)")
    return out


async def read_all(bootstrap: str, topic: str) -> list[Any]:
    return [json.loads(r.value) for r in await read_records(bootstrap, topic)]


async def read_records(bootstrap: str, topic: str) -> list[Any]:
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await c.start()
    try:
        parts = None
        for _ in range(50):
            parts = c.partitions_for_topic(topic)
            if parts:
                break
            await c._client.force_metadata_update()
            await asyncio.sleep(0.1)
        tps = [TopicPartition(topic, p) for p in sorted(parts or [])]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        ends = await c.end_offsets(tps)
        out: list[Any] = []
        deadline = time.monotonic() + 60
        while True:
            behind = [tp for tp in tps if await c.position(tp) < ends[tp]]
            if not behind:
                break
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            for recs in (await c.getmany(timeout_ms=500)).values():
                out += recs
        return out
    finally:
        await c.stop()


async def test_every_public_record_matches_its_json_schema(core: Core) -> None:
    async with httpx.AsyncClient(base_url=core.base_url, timeout=60,
                                 headers={"Authorization": "Bearer e2e-key"}) as api:
        # a flow that makes every kind of record: an image message, a function call, its result
        # (with an image), its application, Turns, and a refused request
        r = await api.post("/v1/sessions", params={"wait": "true", "timeout_ms": "60000"},
                           json={"harness": "claude_code", "placement": "none",
                                 "input": [msg(text("look"), image())], "tags": ["schema"]})
        assert r.status_code == 200, r.text
        r = await api.post("/v1/sessions", json={
            "harness": "codex", "placement": "none",
            "input": f'call get_weather {{"city": "{uuid.uuid4().hex}"}}'})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        deadline = time.monotonic() + 30
        call = None
        while call is None:
            items = (await api.get(f"/v1/sessions/{sid}/items")).json()["items"]
            call = next((i for i in items if i["type"] == "function_call"), None)
            assert call or time.monotonic() < deadline, "no function call"
            await asyncio.sleep(0.2)
        r = await api.post(f"/v1/sessions/{sid}/events",
                           params={"wait": "true", "timeout_ms": "60000"},
                           json={"type": "agent.session.input.tool_result",
                                 "call_id": call["call_id"], "success": True,
                                 "output": [text("chart"),
                                            {"type": "input_image",
                                             "image_url": png_data_uri(3, 3)}]})
        assert r.status_code in (200, 202), r.text
        deadline = time.monotonic() + 30
        while (await api.get(f"/v1/sessions/{sid}/tool_results/{call['call_id']}")
               ).json()["state"] not in ("applied", "uncertain", "failed"):
            assert time.monotonic() < deadline, "no verdict"
            await asyncio.sleep(0.2)
        bad = await api.post("/v1/sessions", json={"harness": "claude_code", "placement": "none",
                                                    "input": [msg(text(" "))]})
        assert bad.status_code == 400

    counts: dict[str, int] = {}
    for name in PUBLIC:
        topic = core.settings.topic_prefix + name
        raw = await read_records(core.settings.kafka_bootstrap_servers, topic)
        records = [json.loads(r.value) for r in raw]
        v = validator(name)
        errors = [(i, e.message, e.json_path) for i, rec in enumerate(records)
                  for e in v.iter_errors(rec)]
        assert not errors, f"{name}: {errors[:5]}"
        wire = wire_errors(name, raw)
        assert not wire, f"{name}: {wire[:5]}"
        field = KEYED_BY[name]
        assert field in message_of(name)["bindings"]["kafka"]["key"]["description"]
        keys = [(r.key or b"").decode() for r in raw]
        assert keys == [str(rec[field]) for rec in records], f"{name} is not keyed by {field}"
        counts[name] = len(records)
    assert all(counts[n] > 0 for n in PUBLIC if n != "session.input.results"), counts
    types = {rec["type"] for rec in await read_all(core.settings.kafka_bootstrap_servers,
                                                   core.settings.topic_prefix + "session.items")}
    assert types == {"message", "turn", "function_call", "function_call_output",
                     "function_call_application"}


async def test_a_poison_records_dlq_record_matches_its_contract(core: Core) -> None:
    """A record that is not JSON on session.input goes to session.input.dlq as
    ``docs/schemas/dlq.json`` and the AsyncAPI session.input.dlq channel describe it, keyed by
    the original key, the original bytes in ``value_b64``."""
    import base64

    bootstrap = core.settings.kafka_bootstrap_servers
    topic = core.settings.topic_prefix + "session.input"
    key = f"poison-{uuid.uuid4().hex}".encode()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"not json {", key=key)
    finally:
        await producer.stop()
    deadline = time.monotonic() + 60
    while True:
        found = [r for r in await read_records(bootstrap, topic + ".dlq") if r.key == key]
        if found:
            break
        assert time.monotonic() < deadline, "no DLQ record for the poison record"
        await asyncio.sleep(0.5)
    (record,) = found
    value = json.loads(record.value)
    errors = [e.message for e in validator("dlq").iter_errors(value)]
    assert not errors, errors
    assert value["reason"] == "undecodable" and value["source_topic"] == topic
    assert base64.b64decode(value["value_b64"]) == b"not json {"
    wire = wire_errors("session.input.dlq", [record])
    assert not wire, wire


def test_the_schemas_reject_what_the_contract_forbids() -> None:
    """The schema is not vacuous: records that break CONTRACT §2 are refused."""
    items = validator("session.items")
    good = {"id": "item_" + "a" * 32, "session_id": "session_" + "b" * 32, "sequence": 1,
            "type": "turn", "created_at": "2026-11-30T10:00:00Z", "turn_id": "turn_1",
            "state": "completed", "reason": None}
    assert items.is_valid(good)
    assert not items.is_valid({**good, "sequence": 0})
    assert not items.is_valid({**good, "state": "done"})
    assert not items.is_valid({**good, "type": "thought"})
    assert not items.is_valid({k: v for k, v in good.items() if k != "reason"})
    message = {**good, "type": "message", "role": "user", "event_id": "evt_1",
               "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}
    del message["state"], message["reason"]
    assert not items.is_valid(message), "a remote image URL is not an Item's content"
    deliveries = validator("runtime.deliveries")
    assert not deliveries.is_valid({"schema": "runtime.delivery/1", "delivery_id": "d",
                                    "runtime_id": "rt_1", "session_id": "session_" + "b" * 32,
                                    "turn_id": "t", "kind": "start", "messages": []} | {
        "messages": [{"role": "user", "content": [{"type": "input_file"}]}]})

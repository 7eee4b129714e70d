"""A consumer written only from the published JSON Schemas (``docs/schemas/*.json``, read with
``jsonschema``; no project code) validates every record the e2e flow produced on the public
topics: Items, input results, registrations, deliveries, observations."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from jsonschema import Draft202012Validator

from tests.support.builders import image, msg, png_data_uri, text
from tests.support.processes import Core

pytestmark = pytest.mark.e2e

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
PUBLIC = ("session.items", "session.input.results", "runtime.registrations",
          "runtime.deliveries", "runtime.observations")


def validator(topic: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads((SCHEMAS / f"{topic}.json").read_text()))


async def read_all(bootstrap: str, topic: str) -> list[Any]:
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
                out += [json.loads(r.value) for r in recs]
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
        records = await read_all(core.settings.kafka_bootstrap_servers, topic)
        v = validator(name)
        errors = [(i, e.message, e.json_path) for i, rec in enumerate(records)
                  for e in v.iter_errors(rec)]
        assert not errors, f"{name}: {errors[:5]}"
        counts[name] = len(records)
    assert all(counts[n] > 0 for n in PUBLIC if n != "session.input.results"), counts
    types = {rec["type"] for rec in await read_all(core.settings.kafka_bootstrap_servers,
                                                   core.settings.topic_prefix + "session.items")}
    assert types == {"message", "turn", "function_call", "function_call_output",
                     "function_call_application"}


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

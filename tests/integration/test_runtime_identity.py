"""Observations only from the bound Runtime (issue 62, part 3), on the real stack: storage takes
a Session's ``runtime.observation/1`` records only from the Runtime the dispatcher bound it to;
one from an unknown ``runtime_id`` or from a live Runtime bound elsewhere goes to
``runtime.observations.dlq`` with reason ``not_bound_runtime`` and writes nothing to the Session
(no Item, no call), and the dispatcher takes no refusal from it (the Turn goes on). The bound
Runtime's observations, published after the forged ones on the same partition, still become
Items. And an observation read before the binding that covers it (``core.facts`` behind) waits
for that binding instead of being refused (docs/security.md)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from services.storage.app import StorageService
from shared import records
from shared.kafka import encode, now_rfc3339
from shared.settings import Settings
from tests.support.binding import binding_fact
from tests.support.kafka import read_records
from tests.support.system import System, SystemFactory, items

pytestmark = pytest.mark.integration
Json = dict[str, Any]
STRANGER = "rt_" + "e" * 32  # registered nowhere


def call_started(call_id: str, name: str) -> Json:
    return {"method": "item/started", "params": {
        "threadId": "thr_1", "turnId": "nt_1", "item": {
            "type": "dynamicToolCall", "id": call_id, "tool": name, "arguments": {"to": "x"}}}}


def observation(runtime_id: str, sid: str, turn_id: str | None, native: Json | None,
                **extra: Any) -> Json:
    return {**records.observation_record(runtime_id=runtime_id, session_id=sid,
                                         harness="codex", native=native, turn_id=turn_id,
                                         observation_id=f"obs_{uuid.uuid4().hex}",
                                         observed_at=now_rfc3339()), **extra}


async def send(settings: Settings, topic: str, *recs: Json) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
    await producer.start()
    try:
        for rec in recs:
            await producer.send_and_wait(topic, encode(rec), key=rec["session_id"].encode())
    finally:
        await producer.stop()


async def dlq(settings: Settings, topic: str, want: int, timeout: float = 30) -> list[Json]:
    return await read_records(settings, f"{topic}.dlq", want, timeout)


async def bound_to(system: System, sid: str, runtime_id: str, timeout: float = 20) -> None:
    """Until storage's Session shows the binding (GET /v1/sessions/{id})."""
    assert system.http is not None
    deadline = time.monotonic() + timeout
    while True:
        view = (await system.http.get(f"/v1/sessions/{sid}")).json()
        if (view.get("binding") or {}).get("runtime_id") == runtime_id:
            return
        assert time.monotonic() < deadline, view
        await asyncio.sleep(0.1)


async def test_observations_from_a_runtime_the_session_is_not_bound_to_are_refused(
        make_system: SystemFactory) -> None:
    system = await make_system(topic_partitions=2)
    bound = await system.runtime("codex")
    r = await system.create("codex", "pay my bills")
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    d = await bound.next_delivery()
    assert d["session_id"] == sid
    await bound_to(system, sid, bound.runtime_id)
    other = await system.runtime("codex")  # live and ready, bound to no Session of these
    before = await items(system, sid)

    obs = system.topics.runtime_observations
    forged = [
        observation(STRANGER, sid, d["turn_id"], call_started("call_evil", "transfer_funds")),
        observation(other.runtime_id, sid, d["turn_id"], call_started("call_evil2", "wire")),
        observation(other.runtime_id, sid, d["turn_id"], {
            "method": "turn/completed", "params": {"threadId": "thr_1", "turnId": "nt_1",
                                                   "status": "completed"}}),
        # a refusal: the dispatcher would fail the Turn for it
        observation(STRANGER, sid, d["turn_id"], None, refusal={
            "delivery_id": d["delivery_id"], "kind": "start", "code": "x", "reason": "forged"}),
    ]
    await send(system.settings, obs, *forged)
    # the bound Runtime's own observation, after them on the same partition, still counts
    await bound.observe(sid, call_started("call_ok", "lookup"), turn_id=d["turn_id"])
    await system.items.wait_for(sid, lambda i: i.get("call_id") == "call_ok")

    after = await items(system, sid)
    added = after[len(before):]
    assert [(i["type"], i.get("call_id")) for i in added] == [("function_call", "call_ok")], added
    assert not [i for i in after if i["type"] == "turn" and i["state"] != "started"], after
    assert system.http is not None
    for cid in ("call_evil", "call_evil2"):
        got = await system.http.get(f"/v1/sessions/{sid}/tool_results/{cid}")
        assert got.status_code == 404, got.text

    # storage: one DLQ record per forged native observation; the dispatcher: the refusal
    dead = await dlq(system.settings, obs, want=4)
    mine = [x for x in dead if x["key"] == sid]
    assert sorted(x["reason"] for x in mine) == ["not_bound_runtime"] * 4, mine
    details = sorted(x["detail"] for x in mine)
    assert sum(STRANGER in t and "refusal" not in t for t in details) == 1, details
    assert sum(other.runtime_id in t for t in details) == 2, details
    assert sum(STRANGER in t and "refusal is not taken" in t for t in details) == 1, details
    assert all(f"bound to ({bound.runtime_id})" in t for t in details), details


async def test_an_observation_read_before_its_binding_waits_for_it(
        make_system: SystemFactory) -> None:
    """``core.facts`` far behind ``runtime.observations``: storage restarted with both unread,
    the binding after 600 other facts on its partition, the observation alone on its own.
    Storage may read the observation first (the order of the two partitions in its fetches is
    the client's); then it holds it back until the binding is read. It is never refused.
    (Refusing at once dead-lettered it in a run where the observation came first; the hold's
    rule itself, deterministically: tests/unit/test_storage_held_observations.py.)"""
    system = await make_system(services=("storage", "admission"), topic_partitions=1,
                               storage_batch_max=20)
    r = await system.create("codex", "hello")
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    rt = "rt_" + uuid.uuid4().hex
    await system.stop_service("storage")
    filler = [records.fact_record("session_" + uuid.uuid4().hex, f"dsp:fill:{n}",
                                  {"kind": "binding", "status": "waiting_for_runtime",
                                   "runtime_id": None, "reason": "filler"})
              for n in range(600)]
    await send(system.settings, system.topics.core_facts, *filler, binding_fact(sid, rt))
    await send(system.settings, system.topics.runtime_observations,
               observation(rt, sid, None, call_started("call_late", "lookup")))
    storage = StorageService(system.settings)
    await storage.start()
    try:
        await system.items.wait_for(sid, lambda i: i.get("call_id") == "call_late", timeout=60)
    finally:
        await storage.stop()
    dead = await dlq(system.settings, system.topics.runtime_observations, want=1, timeout=3)
    assert [x for x in dead if x["key"] == sid] == []

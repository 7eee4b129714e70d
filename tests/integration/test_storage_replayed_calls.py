"""Storage and replayed / synthetic Claude Code records over the real stack (issue 17 items 4, 5).

Primary spec, "Function results": "Replayed, synthetic and Subagent records do not confirm it" —
and they announce nothing either: a replayed ``tool_use`` of a call that was already answered
must neither re-open the call nor add a second ``function_call`` Item. The records go through
``runtime.observations`` exactly as a Runtime forwards them; a live ``tool_use`` of another call
published after them is the barrier (same partition, so storage has handled everything before
it when its Item appears).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from shared import records
from shared.kafka import encode, now_rfc3339
from shared.settings import Settings
from tests.support.system import System

pytestmark = pytest.mark.integration

Json = dict[str, Any]


@pytest.fixture
async def core(settings: Settings) -> AsyncIterator[System]:
    s = settings.model_copy(update={"auth_disabled": True, "topic_partitions": 2, "http_port": 0})
    system = await System(s).start(services=("storage", "admission"))
    try:
        yield system
    finally:
        await system.stop()


def tool_use(call_id: str, **flags: Any) -> Json:
    return {"type": "assistant", "uuid": str(uuid.uuid4()), "session_id": "native-1",
            "parent_tool_use_id": None, **flags,
            "message": {"content": [{"type": "tool_use", "id": call_id, "name": "lookup",
                                     "input": {"q": 1}}]}}


async def observe(system: System, sid: str, *natives: Json) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=system.settings.kafka_bootstrap_servers,
                                acks="all")
    await producer.start()
    try:
        for native in natives:
            await producer.send_and_wait(system.topics.runtime_observations, encode({
                "schema": records.OBSERVATION, "runtime_id": "rt_" + "5" * 32,
                "session_id": sid, "harness": "claude_code", "observed_at": now_rfc3339(),
                "native": native}), key=sid.encode())
    finally:
        await producer.stop()


def calls(system: System, sid: str) -> list[str]:
    seen: dict[str, Json] = {}
    for it in system.items.by_session[sid]:
        seen[it["id"]] = it  # a re-publication carries the same id
    return sorted(str(it["call_id"]) for it in seen.values() if it["type"] == "function_call")


@pytest.mark.parametrize("flags", [{"isReplay": True}, {"isSynthetic": True}, {"isReplay": 0},
                                   {"isSynthetic": None}],
                         ids=["isReplay true", "isSynthetic true", "isReplay 0",
                              "isSynthetic null"])
async def test_a_replayed_tool_use_of_an_answered_call_opens_nothing(
        core: System, flags: Json) -> None:
    r = await core.create("claude_code", "start")
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    await observe(core, sid, tool_use("toolu_1"))
    await core.items.wait_for(sid, lambda i: i["type"] == "function_call")
    res = {"type": records.EV_TOOL_RESULT, "call_id": "toolu_1", "success": True, "output": "ok"}
    answered = await core.event(sid, res)
    assert (answered.status_code, answered.json()["delivery"]) == (202, "resumed"), answered.text
    # a replayed copy of the answered call (new uuid, as a replay has), then the barrier
    await observe(core, sid, tool_use("toolu_1", **flags), tool_use("toolu_barrier"))
    await core.items.wait_for(sid, lambda i: i.get("call_id") == "toolu_barrier")
    await asyncio.sleep(0.3)  # a re-published Item would arrive right behind the barrier's
    assert calls(core, sid) == ["toolu_1", "toolu_barrier"]
    assert core.http is not None
    listed = (await core.http.get(f"/v1/sessions/{sid}/items",
                                  params={"limit": 1000})).json()["items"]
    assert sorted(i["call_id"] for i in listed if i["type"] == "function_call") == [
        "toolu_1", "toolu_barrier"]
    # the answered call stays answered: the same result again is a duplicate, not a new answer
    again = await core.event(sid, res)
    assert (again.status_code, again.json()["delivery"]) == (202, "duplicate"), again.text

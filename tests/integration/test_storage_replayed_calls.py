"""Storage and replayed / synthetic Claude Code records over the real stack.

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
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from shared import records
from shared.kafka import encode, now_rfc3339
from shared.settings import Settings
from tests.support.binding import bind, binding_fact
from tests.support.system import System, SystemFactory

pytestmark = pytest.mark.integration

Json = dict[str, Any]


@pytest.fixture
async def core(make_system: SystemFactory) -> System:
    return await make_system(services=("storage", "admission"), http_port=0)


def tool_use(call_id: str, **flags: Any) -> Json:
    return {"type": "assistant", "uuid": str(uuid.uuid4()), "session_id": "native-1",
            "parent_tool_use_id": None, **flags,
            "message": {"content": [{"type": "tool_use", "id": call_id, "name": "lookup",
                                     "input": {"q": 1}}]}}


RT = "rt_" + "5" * 32  # the Runtime the test plays: each Session is bound to it first


async def observe(system: System, sid: str, *natives: Json) -> None:
    await bind(system.settings, sid, RT)  # (a repeat changes nothing)
    producer = AIOKafkaProducer(bootstrap_servers=system.settings.kafka_bootstrap_servers,
                                acks="all")
    await producer.start()
    try:
        for native in natives:
            await producer.send_and_wait(system.topics.runtime_observations, encode({
                "schema": records.OBSERVATION, "runtime_id": RT,
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


def _tool_result(sid: str, call_id: str) -> Json:
    """A ``session.admitted/1`` tool result as admission publishes it."""
    return {"schema": records.ADMITTED, "op": records.OP_EVENT,
            "request_id": f"req_{uuid.uuid4().hex}", "session_id": sid,
            "event_id": f"evt_{uuid.uuid4().hex}", "admitted_at": now_rfc3339(),
            "fingerprint": uuid.uuid4().hex, "event_type": records.EV_TOOL_RESULT,
            "call_id": call_id, "submission": {"success": True, "output": "ok"},
            "fields_present": ["success", "output"], "submission_fingerprint": "fp-1",
            "client_event_id": None, "metadata": None, "tags": None, "external_actor": None,
            "has_images": False}


@pytest.mark.parametrize("flags", [{"isReplay": True}, {"isSynthetic": True}, {"isReplay": 0},
                                   {"isSynthetic": None}],
                         ids=["isReplay true", "isSynthetic true", "isReplay 0",
                              "isSynthetic null"])
@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "after a restart"])
async def test_the_storage_handler_opens_no_call_from_a_replayed_tool_use(
        settings: Settings, flags: Json, trusted: bool) -> None:
    """The same, one level down: ``StorageHandler`` on the real store (no broker), fed the
    inputs ``record_to_inputs`` makes of each observation — once with its memory trusted and
    once as a fresh replica after a restart (journal and state read from the store)."""
    from services.storage.handler import StorageHandler, record_to_inputs
    from services.storage.repository import StorageRepository
    from shared.store import database, ensure_indexes, make_client
    from tests.support.builders import admitted_create

    client = make_client(settings)
    db = database(client, settings)
    try:
        await ensure_indexes(db)
        handler = StorageHandler(StorageRepository(db, 4096, 1500), now_rfc3339)
        create = admitted_create("start", harness="claude_code")
        sid = create["session_id"]

        def obs(native: Json) -> list[Json]:
            return record_to_inputs({"schema": records.OBSERVATION, "session_id": sid,
                                     "runtime_id": RT, "harness": "claude_code",
                                     "observed_at": now_rfc3339(),
                                     "native": native})

        await handler.handle([create, binding_fact(sid, RT)])
        opened = await handler.handle(obs(tool_use("toolu_1")))
        assert [i["type"] for i in opened.items] == ["function_call"]
        answered = await handler.handle([_tool_result(sid, "toolu_1")])
        assert [i["type"] for i in answered.items] == ["function_call_output"]
        if not trusted:
            handler = StorageHandler(StorageRepository(db, 4096, 1500), now_rfc3339)
        # a replayed copy with a uuid of its own (the observation id), as a replay has
        replay = obs(tool_use("toolu_1", **flags))
        out = await handler.handle(replay)
        items = [i async for i in db.items.find({"session_id": sid})]
        kinds = sorted(str(i.get("type")) for i in items)
        assert kinds.count("function_call") == 1, kinds
        state = (await handler.repo.sessions([sid]))[sid]
        assert "toolu_1" not in state.open_calls  # answered, and still answered
        # nothing published either: not even the old function_call Item again
        assert [i for i in out.items if i["type"] == "function_call"] == []
        assert replay == []  # it is not even a fact
    finally:
        await client.drop_database(settings.mongodb_database)
        await client.close()

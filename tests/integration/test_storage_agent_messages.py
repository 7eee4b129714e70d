"""Agent message Items through storage on the real stack: the observation records of a Turn —
text, a call, the answer, the usage and the end — published twice (a redelivery, a Runtime that
re-sent them) become each Item exactly once, in the order the harness printed them; a 2 MB
answer is stored and published whole."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from shared import records
from shared.kafka import encode, max_record_bytes, now_rfc3339
from tests.support.binding import binding_fact
from tests.support.builders import admitted_create
from tests.support.system import System, SystemFactory

pytestmark = pytest.mark.integration

Json = dict[str, Any]
ANSWER = "\n\n  It is sunny in Paris, 21°C.\n\nAnything else?  \n"


@pytest.fixture
async def core(make_system: SystemFactory) -> System:
    """Admission and storage only: the test plays the Runtime."""
    return await make_system(services=("storage", "admission"), http_port=0)


BOUND: set[tuple[str, str | None]] = set()  # (Session, Runtime) bindings published here


async def publish(system: System, topic: str, *recs: Json) -> None:
    """``recs`` on ``topic``; observations after the binding of their Session to their Runtime
    (the test plays the dispatcher too: storage takes only the bound Runtime's)."""
    producer = AIOKafkaProducer(bootstrap_servers=system.settings.kafka_bootstrap_servers,
                                acks="all", max_request_size=max_record_bytes(system.settings))
    await producer.start()
    try:
        if topic == system.topics.core_facts:
            BOUND.update((r["session_id"], r.get("runtime_id")) for r in recs
                         if r.get("kind") == "binding")
        if topic == system.topics.runtime_observations:
            for sid, rt in dict.fromkeys((r["session_id"], r["runtime_id"]) for r in recs):
                if (sid, rt) not in BOUND:
                    BOUND.add((sid, rt))
                    await producer.send_and_wait(system.topics.core_facts,
                                                 encode(binding_fact(sid, rt)),
                                                 key=sid.encode())
        for rec in recs:
            await producer.send_and_wait(topic, encode(rec), key=rec["session_id"].encode())
    finally:
        await producer.stop()


def observed(sid: str, turn_id: str, native: Json) -> Json:
    # a fresh observation id each time: a Runtime that sends a record again mints a new one;
    # the native item's identity is what makes it the same
    return records.observation_record(runtime_id="rt_" + "1" * 32, session_id=sid,
                                      harness="claude_code", native=native, turn_id=turn_id,
                                      observation_id=f"obs_{uuid.uuid4().hex}",
                                      observed_at=now_rfc3339())


def assistant(uuid_: str, *blocks: Json, parent: str | None = None) -> Json:
    return {"type": "assistant", "uuid": uuid_, "session_id": "native-1",
            "parent_tool_use_id": parent, "message": {"model": "m", "content": list(blocks)}}


async def items_of(system: System, sid: str) -> list[Json]:
    assert system.http is not None
    r = await system.http.get(f"/v1/sessions/{sid}/items", params={"limit": 1000})
    assert r.status_code == 200, r.text
    out: list[Json] = r.json()["items"]
    return out


async def test_redelivered_observations_make_each_agent_item_once_in_printed_order(
        core: System) -> None:
    rec = admitted_create("weather?", harness="claude_code")
    sid = rec["session_id"]
    await publish(core, core.topics.session_admitted, rec)
    started = await core.items.wait_for(sid, lambda i: i["type"] == "turn")
    turn_id = started["turn_id"]
    natives = [
        assistant("a1", {"type": "text", "text": "Let me look that up."}),
        assistant("a2", {"type": "tool_use", "id": "toolu_1", "name": "mcp__core__get_weather",
                         "input": {"city": "Paris"}}),
        # a subagent's text and a replayed record: never agent Items
        assistant("s1", {"type": "text", "text": "subagent says"}, parent="toolu_task"),
        {**assistant("r1", {"type": "text", "text": "replayed"}), "isReplay": True},
        assistant("a3", {"type": "text", "text": ANSWER}),
        {"type": "result", "subtype": "success", "uuid": "res1", "session_id": "native-1",
         "usage": {"input_tokens": 120, "output_tokens": 30, "cache_read_input_tokens": 64}},
    ]
    obs = [observed(sid, turn_id, n) for n in natives]
    await publish(core, core.topics.runtime_observations, *obs)
    await core.items.wait_for(sid, lambda i: i["type"] == "turn" and i["state"] == "completed")
    # the same records again, re-sent (new envelopes) and redelivered (the same bytes)
    again = [observed(sid, turn_id, n) for n in natives]
    await publish(core, core.topics.runtime_observations, *again, *obs)
    marker = admitted_create("x")  # a later record of another Session: storage got past them
    await publish(core, core.topics.session_admitted, marker)
    await core.items.wait_for(marker["session_id"], lambda i: i["type"] == "turn")
    await asyncio.sleep(0.5)

    stored = await items_of(core, sid)
    shape = [(i["sequence"], i["type"], i.get("role"), i.get("phase")) for i in stored]
    assert shape == [
        (1, "message", "user", None), (2, "turn", None, None),
        (3, "message", "agent", "commentary"), (4, "function_call", None, None),
        (5, "message", "agent", "final_answer"), (6, "turn", None, None)]
    commentary, answer = stored[2], stored[4]
    assert commentary["content"] == [{"type": "output_text", "text": "Let me look that up."}]
    assert answer["content"] == [{"type": "output_text", "text": ANSWER}]  # not trimmed
    assert {commentary["phase_source"], answer["phase_source"]} == {"derived"}
    assert commentary["turn_id"] == answer["turn_id"] == turn_id
    assert stored[5]["state"] == "completed" and stored[5]["usage"] == {
        "input_tokens": 120, "output_tokens": 30, "cached_input_tokens": 64}
    # the topic: every Item once by id (a replay re-publishes the same Item, same id and body)
    by_id: dict[str, Json] = {}
    for it in core.items.by_session[sid]:
        assert by_id.setdefault(it["id"], it) == it
    assert sorted(i["sequence"] for i in by_id.values()) == [1, 2, 3, 4, 5, 6]


async def test_a_2_mb_answer_is_stored_and_published_whole(core: System) -> None:
    rec = admitted_create("write a lot", harness="codex")
    sid = rec["session_id"]
    await publish(core, core.topics.session_admitted, rec)
    turn_id = (await core.items.wait_for(sid, lambda i: i["type"] == "turn"))["turn_id"]
    big = (" line of the answer 𝄞\n\n" * 100_000)[: 2 * 1024 * 1024]
    assert len(big.encode()) > 2 * 1024 * 1024 - 16
    native_text = {"method": "item/completed", "params": {"threadId": "th", "turnId": "tu",
                                                          "item": {"type": "agentMessage",
                                                                   "id": "msg_big", "text": big}}}
    end = {"method": "turn/completed", "params": {"threadId": "th", "turn": {
        "id": "tu", "status": "completed"}}}
    await publish(core, core.topics.runtime_observations,
                  *[records.observation_record(
                      runtime_id="rt_" + "2" * 32, session_id=sid, harness="codex", native=n,
                      turn_id=turn_id, observation_id=f"obs_{uuid.uuid4().hex}",
                      observed_at=now_rfc3339())
                    for n in (native_text, end)])
    published = await core.items.wait_for(sid, lambda i: i["type"] == "message"
                                          and i["role"] == "agent", timeout=60)
    assert published["content"][0]["text"] == big and published["phase"] == "final_answer"
    stored = await items_of(core, sid)
    assert [i["type"] for i in stored] == ["message", "turn", "message", "turn"]
    assert stored[2]["content"] == [{"type": "output_text", "text": big}]
    assert stored[3]["usage"] is None  # the harness reported none


STORE_DOCUMENT = 16 * 1024 * 1024  # MongoDB's BSON limit (FerretDB stores larger ones)
RT = "rt_" + "3" * 32


async def _documents_of(system: System, sid: str) -> list[tuple[str, int]]:
    """Every document storage keeps for the Session (its document, Items, journal entries,
    and the chunks they point to) with its BSON size."""
    import bson

    db = system.storage.repo.db
    out = []
    for coll, query in ((db.sessions, {"_id": sid}), (db.items, {"_id": {"$regex": f"^{sid}/"}}),
                        (db.journal, {"session_id": sid}), (db.image_chunks, {})):
        async for d in coll.find(query, batch_size=1):  # one a reply: each may be large
            out.append((str(d["_id"]), len(bson.encode(d))))
    return out


@pytest.mark.slow  # ~3 min on the 2-core machine: 20 MiB through Kafka and the store, twice
async def test_an_answer_over_16_mib_is_stored_in_parts_and_published_whole(
        make_system: SystemFactory) -> None:
    """Issue 56: a 20 MiB answer without a harness phase (held in the Session's state until the
    Turn's end decides it is the final answer) never makes a document over the store's 16 MiB
    limit — the held text and the Item's text live in ordered chunks — and it is published and
    read back whole; storage restarted in between reads the held text back from its chunks."""
    core = await make_system(services=("storage", "admission"), http_port=0)
    rec = admitted_create("write a whole book", harness="codex")
    sid = rec["session_id"]
    await publish(core, core.topics.session_admitted, rec)
    turn_id = (await core.items.wait_for(sid, lambda i: i["type"] == "turn"))["turn_id"]
    # the test plays the dispatcher: the Session's Runtime, whose observations storage takes
    await publish(core, core.topics.core_facts, records.fact_record(
        sid, f"dsp:bind:{sid}:{RT}:1", {"kind": "binding", "status": "bound",
                                         "runtime_id": RT, "reason": None}))
    big = ("a line of the answer, with ünïcode 𝄞\n\n" * 600_000)[: 20 * 1024 * 1024]
    assert len(big.encode()) > 20 * 1024 * 1024
    said = {"method": "item/completed", "params": {"threadId": "th", "turnId": "tu", "item": {
        "type": "agentMessage", "id": "msg_huge", "text": big}}}
    await publish(core, core.topics.runtime_observations, records.observation_record(
        runtime_id=RT, session_id=sid, harness="codex", native=said,
        turn_id=turn_id, observation_id=f"obs_{uuid.uuid4().hex}",
        observed_at=now_rfc3339()))
    db = core.storage.repo.db
    # journaled: the create, the binding, the held message (a change without an Item: its
    # Session document is written with it, not later)
    for _ in range(1200):
        if await db.journal.count_documents({"session_id": sid}) >= 3:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the held message was never journaled")
    await asyncio.sleep(1.0)
    too_big = [(k, n) for k, n in await _documents_of(core, sid) if n > STORE_DOCUMENT]
    assert too_big == [], too_big
    # a fresh storage: the held text comes back from the store, not from memory
    from services.storage.app import StorageService

    await core.stop_service("storage")
    core.storage = StorageService(core.settings)
    await core.storage.start()
    try:
        end = {"method": "turn/completed", "params": {"threadId": "th", "turn": {
            "id": "tu", "status": "completed"}}}
        await publish(core, core.topics.runtime_observations, records.observation_record(
            runtime_id=RT, session_id=sid, harness="codex", native=end,
            turn_id=turn_id, observation_id=f"obs_{uuid.uuid4().hex}",
            observed_at=now_rfc3339()))
        published = await core.items.wait_for(sid, lambda i: i["type"] == "message"
                                              and i["role"] == "agent", timeout=120)
        assert published["content"] == [{"type": "output_text", "text": big}]
        assert published["phase"] == "final_answer"
        await core.items.wait_for(sid, lambda i: i["type"] == "turn"
                                  and i["state"] == "completed", timeout=60)
        stored = await items_of(core, sid)
        assert [i["type"] for i in stored] == ["message", "turn", "message", "turn"]
        assert stored[2]["content"] == [{"type": "output_text", "text": big}]
        too_big = [(k, n) for k, n in await _documents_of(core, sid) if n > STORE_DOCUMENT]
        assert too_big == [], too_big
    finally:
        await core.storage.stop()

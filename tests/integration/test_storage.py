"""Storage over the real stack: input comes back exactly as sent (from ``GET …/items``
and from ``session.items``), function results keep which fields were present, redelivery and
client retries never duplicate or re-number an Item, ``delivery`` says what happened, sequences
have no gaps, paging is stable, and the write rate is measured."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import random
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from PIL import Image
from pymongo import AsyncMongoClient

from services.storage.handler import StorageHandler, source_key
from services.storage.repository import StaleDecision, StorageRepository
from shared import itemstore, records
from shared.kafka import encode, now_rfc3339
from shared.storecodec import unpack
from tests.support.builders import admitted_create, admitted_event
from tests.support.kafka import open_call_by_fact, read_topic, store_counts
from tests.support.system import System, SystemFactory

pytestmark = pytest.mark.integration

Json = dict[str, Any]
INLINE_MAX = 4096  # small, so generated images cross it and take the chunk-store path
CHUNK = 1500


@pytest.fixture
async def core(make_system: SystemFactory) -> System:
    """Admission and storage only: no dispatcher, so Turns end only when the test says so."""
    return await make_system(services=("storage", "admission"), http_port=0,
                             inline_image_max_bytes=INLINE_MAX, image_chunk_bytes=CHUNK)


def http(system: System) -> Any:
    assert system.http is not None
    return system.http


async def publish(system: System, topic: str, *recs: Json) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=system.settings.kafka_bootstrap_servers,
                                acks="all", max_request_size=8 * 1024 * 1024)
    await producer.start()
    try:
        for rec in recs:
            await producer.send_and_wait(topic, encode(rec), key=rec["session_id"].encode())
    finally:
        await producer.stop()


async def end_turn(system: System, session_id: str, turn_id: str) -> None:
    await publish(system, system.topics.core_facts, {
        "schema": records.FACT, "fact_id": f"test:{uuid.uuid4().hex}", "session_id": session_id,
        "kind": "turn", "turn_id": turn_id, "state": "completed", "reason": None})
    await system.items.wait_for(session_id, lambda i: i["type"] == "turn"
                                and i["turn_id"] == turn_id and i["state"] == "completed")


async def all_items(system: System, session_id: str) -> list[Json]:
    r = await http(system).get(f"/v1/sessions/{session_id}/items", params={"limit": 1000})
    assert r.status_code == 200, r.text
    items: list[Json] = r.json()["items"]
    return items


# ---- images --------------------------------------------------------------------------------

def image_uri(fmt: str, w: int, h: int, seed: int, noise: bool) -> str:
    if noise:  # incompressible: a few KB even for small sizes
        img = Image.frombytes("RGB", (w, h), random.Random(seed).randbytes(w * h * 3))
    else:
        img = Image.new("RGB", (w, h), (seed % 256, (seed * 3) % 256, (seed * 7) % 256))
    buf = io.BytesIO()
    img.save(buf, format="PNG" if fmt == "png" else "JPEG")
    return f"data:image/{fmt};base64,{base64.b64encode(buf.getvalue()).decode()}"


BIG_PNG = image_uri("png", 64, 64, 1, noise=True)
assert len(BIG_PNG) > INLINE_MAX * 2  # several chunks


# ---- strategies ------------------------------------------------------------------------------

# Any Unicode scalar value but surrogates (JSON text cannot carry them unpaired): astral
# characters, every kind of whitespace, controls, combining marks.
TEXTS = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=40),
    st.text(st.sampled_from(" \t\n\r\u00a0\u2028\u3000\ufeff\u200b"), max_size=5),
    st.sampled_from(["", "𝄞 😀 𐍈", "e\u0301", "\u0000\u001f"]),
)


@st.composite
def parts(draw: st.DrawFn) -> Json:
    if draw(st.integers(0, 4)) == 0:
        fmt = draw(st.sampled_from(["png", "jpeg"]))
        big = draw(st.integers(0, 3)) == 0
        uri = image_uri(fmt, draw(st.integers(1, 40 if big else 8)),
                        draw(st.integers(1, 40 if big else 8)), draw(st.integers(0, 10_000)),
                        noise=big)
        keys = [("type", "input_image"), ("image_url", uri)]
    else:
        keys = [("type", "input_text"), ("text", draw(TEXTS))]
    if draw(st.booleans()):
        keys.reverse()  # key order is part of "as sent"
    return dict(keys)


def _runnable(content: list[Json]) -> bool:
    return any(p["type"] == "input_image" or p["text"] for p in content)


@st.composite
def messages(draw: st.DrawFn) -> Json:
    content = draw(st.lists(parts(), min_size=1, max_size=5).filter(_runnable))
    m: Json = {"role": "user", "content": content}
    if draw(st.booleans()):
        m = {"role": "user", "type": "message", "content": content}
    return m


def _images(msgs: list[Json]) -> int:
    return sum(p["type"] == "input_image" for m in msgs for p in m["content"])


INPUTS = st.lists(messages(), min_size=1, max_size=4).filter(lambda ms: _images(ms) <= 20)


# ---- the property -------------------------------------------------------------------------------

@hsettings(max_examples=25, deadline=None,
           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(msgs=INPUTS)
@example(msgs=[{"role": "user", "content": [{"type": "input_text", "text": ""},
                                            {"type": "input_image", "image_url": BIG_PNG},
                                            {"type": "input_text", "text": " 𝄞\u3000"}]},
               {"type": "message", "role": "user", "content": [
                   {"image_url": BIG_PNG, "type": "input_image"}]}])
async def test_admitted_messages_come_back_exactly_as_sent(core: System, msgs: list[Json]) -> None:
    body = {"harness": "codex", "placement": "none", "input": msgs}
    raw = json.dumps(body, ensure_ascii=False).encode()
    r = await http(core).post("/v1/sessions", content=raw,
                              headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    sent = [json.dumps(m["content"], ensure_ascii=False) for m in msgs]

    def contents(items: list[Json]) -> list[str]:
        return [json.dumps(i["content"], ensure_ascii=False) for i in items
                if i["type"] == "message"]

    assert contents(r.json()["items"]) == sent
    assert contents(await all_items(core, sid)) == sent
    await core.items.wait_for(sid, lambda i: i["type"] == "turn")
    assert contents(core.items.by_session[sid]) == sent


async def test_big_images_live_in_the_chunk_store_and_come_back_whole(core: System) -> None:
    content = [{"type": "input_image", "image_url": BIG_PNG}]
    r = await core.create("codex", [{"role": "user", "content": content}])
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    client: AsyncMongoClient[Json] = AsyncMongoClient(core.settings.mongodb_uri)
    try:
        db = client[core.settings.mongodb_database]
        doc = await db.items.find_one({"session_id": sid, "type": "message"})
        assert doc is not None and BIG_PNG not in doc["body"] and "image_ref" in doc["body"]
        chunks = await db.image_chunks.count_documents({})
        assert chunks >= len(BIG_PNG) // CHUNK
    finally:
        await client.close()
    assert (await all_items(core, sid))[0]["content"] == content


# ---- function results ---------------------------------------------------------------------------

@pytest.mark.parametrize(("sent", "public"), [
    ({"output": "42"}, {"output": "42", "error": None}),
    ({"error": "boom"}, {"output": None, "error": "boom"}),
    ({"output": [{"type": "input_text", "text": "a"}], "error": "partial"},
     {"output": [{"type": "input_text", "text": "a"}], "error": "partial"}),
    ({}, {"output": None, "error": None}),
    ({"output": None, "error": None}, {"output": None, "error": None}),
], ids=["only-output", "only-error", "both", "neither", "both-null"])
async def test_function_result_keeps_which_fields_were_sent(core: System, sent: Json,
                                                            public: Json) -> None:
    r = await core.create("codex", "call something")
    sid = r.json()["id"]
    await open_call_by_fact(core, sid, "call_1")
    body = {"type": records.EV_TOOL_RESULT, "call_id": "call_1", "success": True, **sent}
    r = await core.event(sid, body)
    assert r.status_code == 202, r.text
    assert r.json()["delivery"] == "resumed"
    item = r.json()["items"][0]
    assert item["type"] == "function_call_output"
    assert {k: item[k] for k in ("output", "error")} == public
    stored = await all_items(core, sid)
    assert {k: stored[-1][k] for k in ("output", "error")} == public
    published = await core.items.wait_for(sid, lambda i: i["type"] == "function_call_output")
    assert {k: published[k] for k in ("output", "error")} == public
    r = await http(core).get(f"/v1/sessions/{sid}/tool_results/call_1")
    assert r.status_code == 200, r.text
    assert r.json()["submission"] == {"call_id": "call_1", "success": True, **sent}
    assert list(r.json()["submission"]) == ["call_id", "success", *sent]
    assert r.json()["fields_present"] == list(sent)


# ---- redelivery -------------------------------------------------------------------------------

async def test_a_redelivered_record_makes_one_set_of_items(core: System) -> None:
    rec = admitted_create("once")
    rec["metadata"] = {"z": 1, "a": [2]}
    sid = rec["session_id"]
    await publish(core, core.topics.session_admitted, rec, rec)
    await core.items.wait_for(sid, lambda i: i["type"] == "turn")
    ev = admitted_event(sid, "steer once")
    await publish(core, core.topics.session_admitted, ev)
    await core.items.wait_for(sid, lambda i: i["sequence"] == 3)
    await publish(core, core.topics.session_admitted, ev)
    # the replies: one per copy, identical bytes
    for r in (rec, ev):
        for _ in range(100):
            replies = [v for v in await read_topic(core.settings, core.topics.storage_replies)
                       if r["request_id"].encode() in v]
            if len(replies) >= 2:
                break
            await asyncio.sleep(0.1)
        assert len(replies) == 2 and replies[0] == replies[1], replies
    stored = await all_items(core, sid)
    assert [(i["sequence"], i["type"]) for i in stored] == [(1, "message"), (2, "turn"),
                                                            (3, "message")]
    # session.items may carry a re-publication (same id, same body): consumers dedupe by id
    await asyncio.sleep(0.5)
    by_id: dict[str, Json] = {}
    for it in core.items.by_session[sid]:
        assert by_id.setdefault(it["id"], it) == it
    assert sorted(i["sequence"] for i in by_id.values()) == [1, 2, 3]
    r = await http(core).get(f"/v1/sessions/{sid}")
    assert r.json()["last_sequence"] == 3


async def test_the_handler_called_twice_decides_once(core: System) -> None:
    handler = core.storage.handler
    rec = admitted_create("direct")
    rec["metadata"] = {"k": "v"}
    first = await handler.handle([rec])
    before = await store_counts(core.settings)
    second = await handler.handle([rec])
    assert await store_counts(core.settings) == before
    assert json.dumps(second.items) == json.dumps(first.items)
    assert json.dumps(second.replies) == json.dumps(first.replies)
    ev = admitted_event(rec["session_id"], "next")
    both = await handler.handle([ev, ev])  # both copies in one batch
    assert [i["sequence"] for i in both.items] == [3, 3]
    assert json.dumps(both.replies[0]) == json.dumps(both.replies[1])
    again = await handler.handle([ev])
    assert json.dumps(again.replies) == json.dumps(both.replies[:1])
    stored = await all_items(core, rec["session_id"])
    assert [i["sequence"] for i in stored] == [1, 2, 3]


async def test_a_record_the_previous_owner_decided_is_replayed_after_a_rebalance(
        core: System) -> None:
    """Rebalance: replica B is trusted (it has been running) and gets a partition
    whose previous owner A decided a record without committing its offset. The record is
    checked against the journal (``verify``: the first batch past the committed offset) and
    replayed — the same Items, the same sequence — instead of decided again at a new one."""
    a = StorageHandler(core.storage.repo, now_rfc3339)
    b = StorageHandler(core.storage.repo, now_rfc3339)
    create = admitted_create("owner A")
    await a.handle([create])
    await b.handle([admitted_create("B has been running")])  # B is trusted now
    ev = admitted_event(create["session_id"], "decided by A, not committed")
    decided = await a.handle([ev])
    again = await b.handle([ev], verify=frozenset({source_key(ev)}))
    assert json.dumps(again.items) == json.dumps(decided.items)
    stored = await all_items(core, create["session_id"])
    assert [i["sequence"] for i in stored] == [1, 2, 3]
    texts = [p["text"] for i in stored if i["type"] == "message" for p in i["content"]]
    assert texts.count("decided by A, not committed") == 1


async def test_a_record_that_decides_nothing_leaves_a_tombstone_in_the_journal(
        core: System) -> None:
    """What a writer journaled past the committed offset must be a prefix of the partition's
    records (services/storage/decided.py: a new owner that finds the first record missing from
    the journal trusts that nothing after it is there). So a record that decides nothing — here
    a fact for a Session not stored yet — is journaled too, as a tombstone; and the tombstone
    does not stop it from being decided when it comes again and its Session exists."""
    repo = core.storage.repo
    h = StorageHandler(repo, now_rfc3339)
    create = admitted_create("tombstone")
    sid = create["session_id"]
    early = {"schema": records.FACT, "fact_id": f"test:{uuid.uuid4().hex}", "session_id": sid,
             "kind": "binding", "status": "bound", "runtime_id": "rt_tomb", "reason": None}
    other = admitted_create("decided after it")
    await h.handle([early, other])
    keys = [source_key(early), source_key(other)]
    assert await repo.journaled(keys) == set(keys)
    await h.handle([create])
    await h.handle([early], verify=frozenset({source_key(early)}))
    doc = unpack(await repo.db.sessions.find_one({"_id": sid}))
    assert doc is not None and doc["binding"]["runtime_id"] == "rt_tomb"


async def _created(core: System, text: str) -> tuple[StorageHandler, str]:
    """A handler on the system's repository, and a Session it created."""
    h = StorageHandler(core.storage.repo, now_rfc3339)
    create = admitted_create(text)
    await h.handle([create])
    return h, create["session_id"]


async def _crash_after_items(core: System, orphan: bool
                             ) -> tuple[str, list[Json], StorageHandler, Json]:
    """Owner A decides a message, and "crashes" after its Items (and, unless ``orphan``, its
    journal entry) are written but before its Session document advanced: the document is put
    back as it was. A fresh replica B then decides the Session's next record — one from another
    topic, so before the redelivery of A's record."""
    a, sid = await _created(core, "crash")
    db = core.storage.repo.db
    before = await db.sessions.find_one({"_id": sid})
    first = admitted_event(sid, "decided by A before the crash")
    await a.handle([first])
    await db.sessions.replace_one({"_id": sid}, before)
    if orphan:
        await db.journal.delete_one({"_id": source_key(first)})
    b = StorageHandler(core.storage.repo, now_rfc3339)
    await b.handle([admitted_event(sid, "decided by B after the restart")])
    return sid, await all_items(core, sid), b, first


async def test_a_decision_whose_session_update_was_lost_is_rolled_forward(core: System) -> None:
    """After storage is killed (-9) mid-batch, B must not decide its record at
    the sequence A's Items already hold (they would be lost to the unique index)."""
    sid, items, _, _ = await _crash_after_items(core, orphan=False)
    assert [i["sequence"] for i in items] == [1, 2, 3, 4]
    texts = [p["text"] for i in items if i["type"] == "message" for p in i["content"]]
    assert texts == ["crash", "decided by A before the crash", "decided by B after the restart"]
    doc = await core.storage.repo.db.sessions.find_one({"_id": sid})
    assert doc is not None and doc["last_sequence"] == 4


async def test_items_without_a_journal_entry_are_removed(core: System) -> None:
    """The crash came between A's Items and its journal entry: nobody was answered and nothing
    was published, so the Items go and B decides at that sequence (A's record, redelivered
    later, is decided again after it)."""
    _, items, _, _ = await _crash_after_items(core, orphan=True)
    assert [i["sequence"] for i in items] == [1, 2, 3]
    texts = [p["text"] for i in items if i["type"] == "message" for p in i["content"]]
    assert texts == ["crash", "decided by B after the restart"]


async def test_a_replay_never_moves_a_session_back(core: System) -> None:
    """A lost Item after kill -9 of storage or a store outage: after the crash,
    B rolled the Session forward past A's record and decided a later one. A's record is then
    redelivered — in the same batch as the Session's next record. Its replay must not set the
    Session back to the state A's decision left (the next record would be decided at the
    sequence B's Item holds: dropped by the unique index, published anyway, lost)."""
    sid, _, b, first = await _crash_after_items(core, orphan=False)
    nxt = admitted_event(sid, "after the redelivery")
    out = await b.handle([first, nxt], verify=frozenset({source_key(first)}))
    assert [i["sequence"] for i in out.items] == [3, 5]
    items = await all_items(core, sid)
    texts = [(i["sequence"], p["text"]) for i in items if i["type"] == "message"
             for p in i["content"]]
    assert texts == [(1, "crash"), (3, "decided by A before the crash"),
                     (4, "decided by B after the restart"), (5, "after the redelivery")]
    published = [i for i in out.items if i["sequence"] == 5]
    assert published and published[0]["content"][0]["text"] == "after the redelivery"


async def test_a_decision_from_stale_state_is_never_published(core: System) -> None:
    """Last line of defence for one writer per Session: B decides from a state that C has
    moved past. B's Item would land at the sequence C's Item holds — it must not be dropped
    by the unique index and published anyway: the write fails (the batch is decided again
    from the store) and, decided again, it goes after C's."""
    a = StorageHandler(core.storage.repo, now_rfc3339)
    b = StorageHandler(core.storage.repo, now_rfc3339)
    create = admitted_create("two writers")
    sid = create["session_id"]
    await a.handle([create])
    await b.handle([admitted_event(sid, "B, up to date")])  # B is trusted and caches sid
    c = StorageHandler(core.storage.repo, now_rfc3339)  # a new owner: reads the store
    await c.handle([admitted_event(sid, "C, behind B's back")])
    late = admitted_event(sid, "B, from its stale memory")
    with pytest.raises(StaleDecision):
        await b.handle([late])
    texts = [(i["sequence"], p["text"]) for i in await all_items(core, sid)
             if i["type"] == "message" for p in i["content"]]
    assert texts == [(1, "two writers"), (3, "B, up to date"), (4, "C, behind B's back")]
    b.decided.forget()
    out = await b.handle([late])
    assert [i["sequence"] for i in out.items] == [5]
    texts = [p["text"] for i in await all_items(core, sid) if i["type"] == "message"
             for p in i["content"]]
    assert texts[-1] == "B, from its stale memory"


async def test_a_record_decided_twice_is_caught_and_its_extra_items_removed(
        core: System) -> None:
    """A trusted B gets a record A already decided (no ``verify`` said so): decided again
    from the store's state, it would be stored twice. The journal entry already there stops
    the write; the Items written before it are found by the roll-forward (their journal
    entry does not hold them) and removed, and the record is then replayed."""
    a = StorageHandler(core.storage.repo, now_rfc3339)
    b = StorageHandler(core.storage.repo, now_rfc3339)
    create = admitted_create("decided twice")
    sid = create["session_id"]
    await a.handle([create])
    await b.handle([admitted_create("B has been running")])
    ev = admitted_event(sid, "once only")
    first = await a.handle([ev])
    with pytest.raises(StaleDecision):
        await b.handle([ev])
    b.decided.forget()
    again = await b.handle([ev])
    assert json.dumps(again.items) == json.dumps(first.items)
    items = await all_items(core, sid)
    assert [i["sequence"] for i in items] == [1, 2, 3]
    assert [p["text"] for i in items if i["type"] == "message"
            for p in i["content"]].count("once only") == 1
    nxt = await b.handle([admitted_event(sid, "next")])
    assert [i["sequence"] for i in nxt.items] == [4]


# ---- idempotency and delivery ------------------------------------------------------------------

async def test_client_request_id_repeat_returns_the_stored_session(core: System) -> None:
    crid = str(uuid.uuid4())
    body = {"harness": "codex", "placement": "none", "input": "hi", "client_request_id": crid,
            "metadata": {"m": 1}}
    r1 = await http(core).post("/v1/sessions", json=body)
    assert r1.status_code == 201, r1.text
    counts = await store_counts(core.settings)
    r2 = await http(core).post("/v1/sessions", json=body)
    assert r2.status_code == 201, r2.text
    assert r2.json() == r1.json()
    assert await store_counts(core.settings) == counts
    r3 = await http(core).post("/v1/sessions", json={**body, "input": "something else"})
    assert r3.status_code == 409, r3.text
    assert r3.json()["error"] == {"type": "conflict", "param": "client_request_id",
                                  "message": r3.json()["error"]["message"]}
    assert await store_counts(core.settings) == counts


async def test_client_event_id_and_tool_result_repeats(core: System) -> None:
    r = await core.create("codex", "start")
    sid = r.json()["id"]
    ev = {"type": records.EV_MESSAGE, "client_event_id": "e-1",
          "input": [{"role": "user", "content": [{"type": "input_text", "text": "steer"}]}]}
    r1 = await core.event(sid, ev)
    assert (r1.status_code, r1.json()["delivery"]) == (202, "steered"), r1.text
    counts = await store_counts(core.settings)
    r2 = await core.event(sid, ev)
    assert (r2.status_code, r2.json()["delivery"]) == (202, "duplicate"), r2.text
    assert r2.json()["items"] == r1.json()["items"]
    assert r2.json()["event_id"] == r1.json()["event_id"]
    r3 = await core.event(sid, {**ev, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "other"}]}]})
    assert r3.status_code == 409, r3.text
    assert await store_counts(core.settings) == counts

    await open_call_by_fact(core, sid, "c1")
    res = {"type": records.EV_TOOL_RESULT, "call_id": "c1", "success": True, "output": "ok"}
    t1 = await core.event(sid, res)
    assert (t1.status_code, t1.json()["delivery"]) == (202, "resumed"), t1.text
    counts = await store_counts(core.settings)
    t2 = await core.event(sid, res)
    assert (t2.status_code, t2.json()["delivery"]) == (202, "duplicate"), t2.text
    assert t2.json()["items"] == t1.json()["items"]
    t3 = await core.event(sid, {**res, "output": "different"})
    assert (t3.status_code, t3.json()["error"]["type"]) == (409, "conflict"), t3.text
    t4 = await core.event(sid, {**res, "error": None})  # a field present that was absent
    assert t4.status_code == 409, t4.text
    assert await store_counts(core.settings) == counts


async def test_delivery_and_sequences_across_a_mixed_session(core: System) -> None:
    r = await core.create("codex", "one")
    assert r.status_code == 201
    sid = r.json()["id"]
    turn1 = r.json()["items"][-1]["turn_id"]
    m = [{"role": "user", "content": [{"type": "input_text", "text": "two"}]}]
    ev = {"type": records.EV_MESSAGE, "input": m}
    assert (await core.event(sid, ev)).json()["delivery"] == "steered"
    await open_call_by_fact(core, sid, "k1")
    res = {"type": records.EV_TOOL_RESULT, "call_id": "k1", "success": False, "error": "no"}
    assert (await core.event(sid, res)).json()["delivery"] == "resumed"
    await end_turn(core, sid, turn1)
    r = await core.event(sid, {**ev, "client_event_id": "x"})
    assert r.json()["delivery"] == "started"
    assert [i["type"] for i in r.json()["items"]] == ["message", "turn"]
    assert (await core.event(sid, {**ev, "client_event_id": "x"})).json()["delivery"] == \
        "duplicate"
    assert (await core.event(sid, {"type": records.EV_MESSAGE, "input": "bad"})).status_code \
        == 400
    assert (await core.event(sid, ev)).json()["delivery"] == "steered"
    stored = await all_items(core, sid)
    assert [i["sequence"] for i in stored] == list(range(1, 10))
    assert [i["type"] for i in stored] == [
        "message", "turn", "message", "function_call", "function_call_output", "turn",
        "message", "turn", "message"]
    await core.items.wait_for(sid, lambda i: i["sequence"] == 9)
    assert [i["sequence"] for i in core.items.by_session[sid]] == list(range(1, 10))


async def test_item_paging_is_stable(core: System) -> None:
    msgs = [{"role": "user", "content": [{"type": "input_text", "text": f"m{i}"}]}
            for i in range(7)]
    r = await core.create("codex", msgs)
    sid = r.json()["id"]
    for i in range(3):
        await core.event(sid, {"type": records.EV_MESSAGE, "input": msgs[i:i + 1]})
    full = await all_items(core, sid)
    assert [i["sequence"] for i in full] == list(range(1, 12))
    for limit in (1, 3, 4, 11, 50):
        for _ in range(2):
            pages: list[Json] = []
            after = 0
            while True:
                p = await http(core).get(f"/v1/sessions/{sid}/items",
                                         params={"after": after, "limit": limit})
                assert p.status_code == 200, p.text
                pages.extend(p.json()["items"])
                assert len(p.json()["items"]) <= limit
                after = p.json()["next_after"]
                if not p.json()["has_more"]:
                    break
            assert pages == full, limit
    p = await http(core).get(f"/v1/sessions/{sid}/items", params={"after": 11, "limit": 5})
    assert (p.json()["items"], p.json()["has_more"], p.json()["next_after"]) == ([], False, 11)
    p = await http(core).get(f"/v1/sessions/{sid}/items", params={"after": 4, "limit": 2})
    assert [i["sequence"] for i in p.json()["items"]] == [5, 6]


async def test_an_event_right_after_the_201_finds_its_session(core: System) -> None:
    for n in range(20):
        r = await core.create("claude_code", f"create {n}")
        assert r.status_code == 201, r.text
        e = await core.event(r.json()["id"], {"type": records.EV_MESSAGE, "input": [
            {"role": "user", "content": [{"type": "input_text", "text": f"then {n}"}]}]})
        assert e.status_code == 202, (n, e.text)


# ---- Session documents behind the journal (services/storage/sessionwriter.py) -----------------

async def _decide(h: StorageHandler, repo: StorageRepository, *recs: Json) -> None:
    out = await h.handle(list(recs), defer_rest=True)
    await repo.apply_rest(out.rest, defer=True)


async def test_session_documents_lag_behind_their_items_and_every_reader_sees_the_head(
        core: System) -> None:
    """A batch does not wait for its Session updates (one FerretDB statement each): they are
    written behind it — except a creation (``GET`` must find the Session once its creator is
    answered) and a change without an Item (a binding: readers bring a lagging document up from
    the Items' journal entries, which a binding has none of). Storage's own reads and admission's
    reads see the newest state all the same. This repository's writer is never started, so
    what it defers stays unwritten."""
    repo = StorageRepository(core.storage.repo.db, INLINE_MAX, CHUNK)
    db = repo.db
    h = StorageHandler(repo, now_rfc3339)
    create = admitted_create("behind")
    sid = create["session_id"]
    await _decide(h, repo, create)
    doc = await db.sessions.find_one({"_id": sid})
    assert doc is not None and doc["version"] == 1 and sid not in repo.session_writer.dirty
    await _decide(h, repo, admitted_event(sid, "one"), admitted_event(sid, "two"))
    doc = await db.sessions.find_one({"_id": sid})
    assert doc is not None and doc["version"] == 1  # behind its Items
    newest = repo.session_writer.dirty[sid]
    assert newest["version"] == 3 and newest["last_sequence"] > doc["last_sequence"]
    # storage's own read: the newest state, not the store's
    assert (await repo.sessions([sid]))[sid].version == 3
    # every reader: the document brought up from the journal
    head = await itemstore.session_head(db, doc)
    assert head is not None and head["version"] == 3
    assert head["last_sequence"] == newest["last_sequence"]
    r = await http(core).get(f"/v1/sessions/{sid}")
    assert r.status_code == 200 and r.json()["last_sequence"] == newest["last_sequence"], r.text
    r = await http(core).get(f"/v1/sessions/{sid}/items", params={"limit": 100})
    assert [i["sequence"] for i in r.json()["items"]] == list(
        range(1, newest["last_sequence"] + 1))
    # a binding changes the state without an Item: written now, with everything before it
    await _decide(h, repo, {"schema": records.FACT, "fact_id": f"test:{uuid.uuid4().hex}",
                            "session_id": sid, "kind": "binding", "status": "bound",
                            "runtime_id": "rt_behind", "reason": None})
    doc = unpack(await db.sessions.find_one({"_id": sid}))
    assert doc is not None and doc["version"] == 4 and doc["binding"]["runtime_id"] == "rt_behind"
    assert doc["last_sequence"] == newest["last_sequence"] and sid not in repo.session_writer.dirty


async def test_the_head_of_a_session_never_takes_an_item_without_its_journal_entry(
        core: System) -> None:
    """An Item past ``last_sequence`` whose journal entry is missing (a crash between the two
    writes; ``roll_forward`` removes it) is not part of the Session: readers stop before it."""
    _, sid = await _created(core, "orphan ahead")
    db = core.storage.repo.db
    doc = await db.sessions.find_one({"_id": sid})
    assert doc is not None
    nxt = doc["last_sequence"] + 1
    await db.items.insert_one({"_id": f"{sid}/{nxt}", "session_id": sid, "sequence": nxt,
                               "source_key": f"req:nobody#{nxt}"})
    head = await itemstore.session_head(db, doc)
    assert head is not None and head["last_sequence"] == doc["last_sequence"]


async def test_a_result_for_a_call_whose_document_is_still_behind_its_item_goes_to_storage(
        make_system: SystemFactory) -> None:
    """Found by the chaos suite (CI at 3ddd35f, kill -9 broker and admission + storage rows):
    a client saw a ``function_call`` Item (``GET …/items`` shows the journaled head) and sent
    its result before storage had written the call's document; admission answered 404 "the
    Session never issued this call". The call is open in the Session's newest state: admission
    hands the result to storage (which writes a batch's calls before it decides the next batch)
    instead. A call the Session never issued is still refused at once, and nothing is handed
    over. Admission alone here: what it hands over stays on the topic, unanswered (504)."""
    system = await make_system(services=("admission",), http_port=0,
                               storage_reply_timeout_ms=1_500)
    repo = StorageRepository(system.storage.repo.db, INLINE_MAX, CHUNK)
    h = StorageHandler(repo, now_rfc3339)
    create = admitted_create("a call behind its item")
    sid = create["session_id"]
    await h.handle([create])
    fact = {"schema": records.FACT, "fact_id": f"test:{uuid.uuid4().hex}", "session_id": sid,
            "kind": "function_call", "call_id": "call_behind", "name": "lookup",
            "arguments": {"q": 1}}
    await h.handle([fact], defer_rest=True)  # Items and journal; the call document not yet
    assert await repo.db.calls.find_one({"_id": f"{sid}/call_behind"}) is None
    listed = await http(system).get(f"/v1/sessions/{sid}/items", params={"limit": 100})
    assert any(i["type"] == "function_call" and i["call_id"] == "call_behind"
               for i in listed.json()["items"]), listed.text
    result = {"type": records.EV_TOOL_RESULT, "call_id": "call_behind", "success": True,
              "output": "42"}
    r = await system.event(sid, result)
    assert r.status_code == 504, r.text  # handed over; no storage here to answer
    handed = [json.loads(x) for x in
              await read_topic(system.settings, system.topics.session_admitted)]
    assert [x.get("call_id") for x in handed if x.get("session_id") == sid] == ["call_behind"]
    r = await system.event(sid, {**result, "call_id": "call_never"})
    assert r.status_code == 404 and r.json()["error"]["param"] == "call_id", r.text
    handed = [json.loads(x) for x in
              await read_topic(system.settings, system.topics.session_admitted)]
    assert [x.get("call_id") for x in handed if x.get("session_id") == sid] == ["call_behind"]


# ---- write rate --------------------------------------------------------------------------------

RATE_RECORDS = int(os.environ.get("SESSION_CORE_RATE_RECORDS", "5000"))
RATE_SESSIONS = 100


async def test_storage_write_rate(core: System, capsys: pytest.CaptureFixture[str]) -> None:
    """Publish N admitted records (creates, then message events) across 100 Sessions directly to
    ``session.admitted``; time until every Item is on ``session.items``. Measured, not asserted
    (beyond completeness and order)."""
    creates = [admitted_create(f"s{i}") for i in range(RATE_SESSIONS)]
    sids = [c["session_id"] for c in creates]
    events = [admitted_event(sids[i % RATE_SESSIONS], f"e{i}")
              for i in range(RATE_RECORDS - RATE_SESSIONS)]
    expected = {sid: 2 for sid in sids}
    for e in events:
        expected[e["session_id"]] += 1
    total = sum(expected.values())
    producer = AIOKafkaProducer(bootstrap_servers=core.settings.kafka_bootstrap_servers,
                                acks="all", enable_idempotence=True, linger_ms=5)
    await producer.start()
    t0 = time.perf_counter()
    try:
        futs = [await producer.send(core.topics.session_admitted, encode(r),
                                    key=r["session_id"].encode())
                for r in creates + events]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()
    t_pub = time.perf_counter() - t0

    def arrived() -> int:
        return sum(len(core.items.by_session.get(s, [])) for s in sids)

    async with asyncio.timeout(300), core.items.changed:
        await core.items.changed.wait_for(lambda: arrived() >= total)
    elapsed = time.perf_counter() - t0
    for sid in sids:
        assert [i["sequence"] for i in core.items.by_session[sid]] == list(
            range(1, expected[sid] + 1))
    with capsys.disabled():
        print(f"\n[rate] {RATE_RECORDS} records → {total} Items in {elapsed:.2f}s "
              f"= {total / elapsed:.0f} Items/s (publish {t_pub:.2f}s, "
              f"storage_batch_max={core.settings.storage_batch_max}, "
              f"partitions={core.settings.topic_partitions})")

"""Tenancy over the real stack: a Session belongs to the tenant of the
key that created it; another tenant gets the same 404 as for a Session that does not exist, on
every path, and its refused events write nothing; creation idempotency is per tenant; a tenant
at its in-flight cap gets 429 with Retry-After while another tenant is served."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from pymongo import AsyncMongoClient

from shared import records
from shared.domain.tenancy import key_entry
from shared.kafka import encode
from tests.support.kafka import InputClient, open_call_by_fact, read_topic, store_counts
from tests.support.system import System, SystemFactory

pytestmark = pytest.mark.integration

Json = dict[str, Any]
KEY_A, KEY_B = f"acme-{uuid.uuid4().hex}", f"beta-{uuid.uuid4().hex}"
CALL_ID = "toolu_tenancy_1"
CAP = 2
NOT_FOUND = {"error": {"type": "not_found", "message": "no such Session", "param": "session_id"}}


@dataclass
class Tenants:
    system: System
    kafka: InputClient
    a: httpx.AsyncClient
    b: httpx.AsyncClient


def _client(system: System, key: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=system.admission.http),
                             base_url="http://core", timeout=90, headers=headers)


@pytest.fixture(name="t")
async def tenants(make_system: SystemFactory) -> AsyncIterator[Tenants]:
    """Admission and storage (no dispatcher: a Turn runs until the test ends it), auth on with
    two tenants, each capped at ``CAP`` requests in flight."""
    async for t in _tenants(make_system, max_inflight_per_tenant=CAP):
        yield t


@pytest.fixture(name="t_waits")
async def tenants_one_wait(make_system: SystemFactory) -> AsyncIterator[Tenants]:
    """The same, with one concurrent ``?wait`` per tenant (and room for everything else)."""
    async for t in _tenants(make_system, max_concurrent_waits_per_tenant=1,
                            max_concurrent_waits=10, max_inflight_per_tenant=50):
        yield t


async def _tenants(make_system: SystemFactory, **limits: int) -> AsyncIterator[Tenants]:
    keys = f"{key_entry('acme', KEY_A)},{key_entry('beta', KEY_B)}"
    system = await make_system(services=("storage", "admission"), auth_disabled=False,
                               api_keys=keys, http_port=0, **limits)
    kafka = await InputClient(system.settings).start()
    a, b = _client(system, KEY_A), _client(system, KEY_B)
    try:
        yield Tenants(system, kafka, a, b)
    finally:
        await a.aclose()
        await b.aclose()
        await kafka.stop()


def _create(text: str, **extra: Any) -> Json:
    return {"harness": "claude_code", "placement": "none", "input": text, **extra}


def _message(text: str, **extra: Any) -> Json:
    return {"type": records.EV_MESSAGE, "input": [{"role": "user", "content": [
        {"type": "input_text", "text": text}]}], **extra}


async def _admitted_count(system: System) -> int:
    return len(await read_topic(system.settings, system.topics.session_admitted))


async def test_another_tenant_gets_404_on_every_path_and_writes_nothing(t: Tenants) -> None:
    r = await t.a.post("/v1/sessions", json=_create("acme's secret"))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    await open_call_by_fact(t.system, sid, CALL_ID)
    for path in (f"/v1/sessions/{sid}", f"/v1/sessions/{sid}/items",
                 f"/v1/sessions/{sid}/tool_results/{CALL_ID}"):
        assert (await t.a.get(path)).status_code == 200, path
    unknown = "session_" + uuid.uuid4().hex
    assert (await t.a.get(f"/v1/sessions/{unknown}")).json() == NOT_FOUND

    before = await store_counts(t.system.settings)
    admitted_before = await _admitted_count(t.system)
    tool_result = {"type": records.EV_TOOL_RESULT, "call_id": CALL_ID, "success": True,
                   "output": "beta's answer"}
    answers = [
        await t.b.get(f"/v1/sessions/{sid}"),
        await t.b.get(f"/v1/sessions/{sid}/items"),
        await t.b.get(f"/v1/sessions/{sid}/items", params={"after": 0, "limit": 1000}),
        await t.b.get(f"/v1/sessions/{sid}/tool_results/{CALL_ID}"),
        await t.b.get(f"/v1/sessions/{sid}/tool_results/nope"),
        await t.b.post(f"/v1/sessions/{sid}/events", json=_message("beta steers")),
        await t.b.post(f"/v1/sessions/{sid}/events",
                       json=_message("beta again", client_event_id="ce-1")),
        await t.b.post(f"/v1/sessions/{sid}/events", json=tool_result),
        await t.b.post(f"/v1/sessions/{sid}/events", json=_message("beta waits"),
                       params={"wait": "true", "timeout_ms": "60000"}),
        await t.b.post(f"/v1/sessions/{sid}/events", json=tool_result,
                       params={"wait": "true", "timeout_ms": "60000"}),
    ]
    for r in answers:
        assert (r.status_code, r.json()) == (404, NOT_FOUND), (r.request.url, r.text)
        assert "acme" not in r.text
    # session.input: a record of another tenant, and one without a tenant (the default one)
    for tenant in ({"tenant": "beta"}, {}):
        ans = await t.kafka.ask(records.OP_EVENT, {**_message("beta via kafka"), **tenant},
                                session_id=sid)
        assert (ans["status"], ans["body"]) == (404, NOT_FOUND)

    assert await store_counts(t.system.settings) == before
    assert await _admitted_count(t.system) == admitted_before  # nothing handed to storage
    # the call is still open for its owner, whose answer is taken
    r = await t.a.post(f"/v1/sessions/{sid}/events", json=tool_result)
    assert r.status_code == 202, r.text
    items = (await t.a.get(f"/v1/sessions/{sid}/items")).json()["items"]
    assert not [i for i in items if "beta" in str(i.get("content"))]


async def test_the_same_client_request_id_in_two_tenants_makes_two_sessions(t: Tenants) -> None:
    crid = str(uuid.uuid4())
    body = _create("same id, same body", client_request_id=crid)
    ra = await t.a.post("/v1/sessions", json=body)
    rb = await t.b.post("/v1/sessions", json=body)
    assert (ra.status_code, rb.status_code) == (201, 201), (ra.text, rb.text)
    sid_a, sid_b = ra.json()["id"], rb.json()["id"]
    assert sid_a != sid_b
    assert "Idempotent-Replayed" not in rb.headers
    # each tenant's repeat returns its own Session
    again_a = await t.a.post("/v1/sessions", json=body)
    again_b = await t.b.post("/v1/sessions", json=body)
    assert again_a.json()["id"] == sid_a and again_a.headers["Idempotent-Replayed"] == "true"
    assert again_b.json()["id"] == sid_b and again_b.headers["Idempotent-Replayed"] == "true"
    # the same over session.input, naming the tenant
    ans = await t.kafka.ask(records.OP_CREATE, {**body, "tenant": "beta"})
    assert (ans["status"], ans["body"]["id"]) == (201, sid_b)
    # and each tenant sees only its own
    assert (await t.a.get(f"/v1/sessions/{sid_b}")).status_code == 404
    assert (await t.b.get(f"/v1/sessions/{sid_a}")).status_code == 404
    client: AsyncMongoClient[Json] = AsyncMongoClient(t.system.settings.mongodb_uri)
    try:
        db = client[t.system.settings.mongodb_database]
        docs = {d["_id"]: d["tenant"] async for d in db.sessions.find({}, {"tenant": 1})}
    finally:
        await client.close()
    assert docs[sid_a] == "acme" and docs[sid_b] == "beta"


async def test_storage_refuses_another_tenants_event_that_bypassed_admission(
        t: Tenants) -> None:
    """Defence in depth: a ``session.admitted`` record naming another tenant is answered 404 by
    storage itself and writes no Item."""
    r = await t.a.post("/v1/sessions", json=_create("acme only"))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    before = await store_counts(t.system.settings)
    rid = f"req_{uuid.uuid4().hex}"
    record = {"schema": records.ADMITTED, "op": records.OP_EVENT, "request_id": rid,
              "session_id": sid, "event_id": f"evt_{uuid.uuid4().hex}",
              "admitted_at": "2026-01-01T00:00:00.000Z", "fingerprint": "fp",
              "event_type": records.EV_MESSAGE, "tenant": "beta",
              "messages": [{"role": "user", "content": [{"type": "input_text", "text": "b"}]}]}
    replies = t.system.admission.replies
    fut = replies.expect(rid)
    producer = AIOKafkaProducer(bootstrap_servers=t.system.settings.kafka_bootstrap_servers,
                                acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(t.system.topics.session_admitted, encode(record),
                                     key=sid.encode())
        reply = await asyncio.wait_for(fut, 60)
    finally:
        replies.forget(rid)
        await producer.stop()
    assert (reply["status"], reply["body"]) == (404, NOT_FOUND)
    assert await store_counts(t.system.settings) == before


@pytest.mark.parametrize("auth", [None, "Bearer wrong-key", f"Basic {KEY_A}"],
                         ids=["no-header", "wrong-bearer", "basic-with-a-key"])
async def test_without_a_valid_key_nothing_is_admitted(t: Tenants, auth: str | None) -> None:
    before = await store_counts(t.system.settings)
    async with _client(t.system, None) as c:
        r = await c.post("/v1/sessions", json=_create("who am I"),
                         headers={"Authorization": auth} if auth else {})
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
    assert await store_counts(t.system.settings) == before


async def test_a_tenant_at_its_cap_gets_429_while_another_is_served(t: Tenants) -> None:
    r = await t.a.post("/v1/sessions", json=_create("a long turn"))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    turn_id = next(i["turn_id"] for i in r.json()["items"] if i["type"] == "turn")
    # CAP waits on the running Turn hold acme's slots until the Turn ends
    markers = [uuid.uuid4().hex for _ in range(CAP)]
    held = [asyncio.create_task(t.a.post(
        f"/v1/sessions/{sid}/events", json=_message(f"wait {m}"),
        params={"wait": "true", "timeout_ms": "90000"})) for m in markers]
    for m in markers:  # each one's message is stored: the request is inside admission
        await t.system.items.wait_for(
            sid, lambda i, m=m: i["type"] == "message" and m in str(i["content"]), timeout=60)
    assert not any(h.done() for h in held)

    refused = await t.a.get(f"/v1/sessions/{sid}")
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1
    before = await store_counts(t.system.settings)
    refused = await t.a.post("/v1/sessions", json=_create("one too many"))
    assert refused.status_code == 429
    assert await store_counts(t.system.settings) == before  # a 429 writes nothing

    served = await t.b.post("/v1/sessions", json=_create("beta is not slowed"))
    assert served.status_code == 201, served.text
    assert (await t.b.get(f"/v1/sessions/{served.json()['id']}")).status_code == 200

    # the Turn ends: the waits answer and acme's slots are free again
    await _end_turn(t.system, sid, turn_id)
    done = await asyncio.wait_for(asyncio.gather(*held), 60)
    assert [d.status_code for d in done] == [200] * CAP
    assert (await t.a.get(f"/v1/sessions/{sid}")).status_code == 200


async def _end_turn(system: System, sid: str, turn_id: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=system.settings.kafka_bootstrap_servers,
                                acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(system.topics.core_facts, encode({
            "schema": records.FACT, "fact_id": f"test:{sid}:turn_end", "session_id": sid,
            "kind": "turn", "turn_id": turn_id, "state": "completed", "reason": None}),
            key=sid.encode())
    finally:
        await producer.stop()


async def test_a_tenant_at_its_wait_bound_gets_429_while_another_tenant_waits(
        t_waits: Tenants) -> None:
    """Concurrent waits are bounded per tenant; past the bound 429 with Retry-After,
    decided before anything is admitted; another tenant's wait is still accepted."""
    t = t_waits
    r = await t.a.post("/v1/sessions", json=_create("acme's long turn"))
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    turn_id = next(i["turn_id"] for i in r.json()["items"] if i["type"] == "turn")
    marker = uuid.uuid4().hex
    held = asyncio.create_task(t.a.post(
        f"/v1/sessions/{sid}/events", json=_message(f"wait {marker}"),
        params={"wait": "true", "timeout_ms": "90000"}))
    await t.system.items.wait_for(
        sid, lambda i: i["type"] == "message" and marker in str(i["content"]), timeout=60)
    assert not held.done()

    before = (await store_counts(t.system.settings), await _admitted_count(t.system))
    refused = await t.a.post(f"/v1/sessions/{sid}/events", json=_message("a second wait"),
                             params={"wait": "true", "timeout_ms": "1000"})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["type"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1
    refused = await t.a.post("/v1/sessions", json=_create("a wait on creation"),
                             params={"wait": "true", "timeout_ms": "1000"})
    assert refused.status_code == 429, refused.text
    assert (await store_counts(t.system.settings), await _admitted_count(t.system)) == before
    # acme without wait is served; beta's wait has its own slot (its budget runs out: 202)
    assert (await t.a.get(f"/v1/sessions/{sid}")).status_code == 200
    other = await t.b.post("/v1/sessions", json=_create("beta waits too"),
                           params={"wait": "true", "timeout_ms": "1500"})
    assert other.status_code == 202, other.text
    assert [i["type"] for i in other.json()["items"]][:1] == ["message"]

    await _end_turn(t.system, sid, turn_id)
    done = await asyncio.wait_for(held, 60)
    assert done.status_code == 200, done.text
    assert done.json()["items"][-1]["type"] == "turn"
    again = await t.a.post(f"/v1/sessions/{sid}/events", json=_message("acme's slot is free"),
                           params={"wait": "true", "timeout_ms": "1000"})
    assert again.status_code in (200, 202), again.text


async def test_with_auth_disabled_everyone_is_the_default_tenant(
        make_system: SystemFactory) -> None:
    system = await make_system(services=("storage", "admission"), api_keys="", http_port=0)
    kafka = await InputClient(system.settings).start()
    try:
        async with _client(system, None) as c:
            r = await c.post("/v1/sessions", json=_create("no key needed"))
            assert r.status_code == 201, r.text
            sid = r.json()["id"]
            assert (await c.get(f"/v1/sessions/{sid}")).status_code == 200
        # a session.input record without a tenant is the default tenant's: it reaches the Session
        ans = await kafka.ask(records.OP_EVENT, _message("via kafka"), session_id=sid)
        assert ans["status"] == 202, ans
        ans = await kafka.ask(records.OP_EVENT, {**_message("x"), "tenant": "other"},
                              session_id=sid)
        assert ans["status"] == 404
    finally:
        await kafka.stop()


async def test_items_on_the_topic_carry_the_tenant_of_the_creating_request(t: Tenants) -> None:
    """A multi-tenant consumer routes ``session.items`` by ``tenant``: every Item of a Session
    — its messages, its Turn, a later function call decided from a fact — names the tenant of
    the request that created the Session, whether it came over HTTP or over ``session.input``;
    the HTTP answers (one tenant's own view) stay without it."""
    r = await t.a.post("/v1/sessions", json=_create("acme routes"))
    assert r.status_code == 201, r.text
    assert all("tenant" not in i for i in r.json()["items"])
    acme = r.json()["id"]
    await open_call_by_fact(t.system, acme, "toolu_route_1")
    ans = await t.kafka.ask(records.OP_CREATE, {**_create("beta routes"), "tenant": "beta"})
    assert ans["status"] == 201, ans
    beta = ans["body"]["id"]
    items = [json.loads(v) for v in await read_topic(t.system.settings,
                                                     t.system.topics.session_items)]
    routed = {sid: [(i["type"], i.get("tenant")) for i in items if i["session_id"] == sid]
              for sid in (acme, beta)}
    assert routed[acme] == [("message", "acme"), ("turn", "acme"), ("function_call", "acme")]
    assert routed[beta] == [("message", "beta"), ("turn", "beta")]

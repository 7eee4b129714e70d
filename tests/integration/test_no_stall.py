"""No record stalls a partition (issue 62, part 1), on the real stack with one partition per
topic, so every poison record is followed in its partition by the valid record sent after it.

For each consumer (storage, the dispatcher, the receipt tracker, admission's ``session.input``)
a record of the right schema that can never succeed — too large for the store's 16 MB
document, or its answer too large for the results topic — is dead-lettered with the reason
``too_large`` (``shared/failures.py``), and the valid record behind it is processed.

Then the issue's must-show: the largest body admission admits flows through every service (one
byte of stored form more is 413 and writes nothing; the issue's 32 MiB body is 413), and a
tenant B Session created after it is bound and answered within the bind timeout."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from pymongo import AsyncMongoClient

from runtimes.app import RuntimeConfig, RuntimeService
from services.admission.core import Admission
from services.admission.domain import validation as rules
from shared import records
from shared.domain import wire
from shared.domain.errors import ApiError
from shared.domain.poison import TOO_LARGE, UNPROCESSABLE
from shared.domain.tenancy import key_entry
from shared.kafka import decode, encode
from shared.settings import STORED_FORM_MAX_BYTES, Settings
from tests.support.kafka import read_topic, store_counts
from tests.support.system import System, SystemFactory

pytestmark = pytest.mark.integration

Json = dict[str, Any]
HUGE = 17 * 1024 * 1024  # over the store's 16 MiB document, within the topics' records
DLQ_WITHIN_S = 30.0  # a generous bound for "within seconds" on the loaded 2-core machine


@pytest.fixture
async def producer(settings: Settings) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all",
                         max_request_size=64 * 1024 * 1024)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


def _noise(n: int) -> str:
    """``n`` characters that do not compress (base64 of random bytes)."""
    return base64.b64encode(os.urandom(n * 3 // 4 + 3)).decode()[:n]


async def _dead_lettered(settings: Settings, topic: str, value: bytes,
                         timeout: float = DLQ_WITHIN_S) -> Json:
    """The DLQ record of ``value`` on ``<topic>.dlq``, waited for."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for raw in await read_topic(settings, f"{topic}.dlq"):
            d = decode(raw)
            if d.get("value_b64") and base64.b64decode(d["value_b64"]) == value:
                return d  # type: ignore[no-any-return]
        await asyncio.sleep(0.5)
    raise AssertionError(f"no DLQ record on {topic}.dlq within {timeout} s")


def _admitted(text: str) -> Json:
    body = {"harness": "codex", "placement": "none", "input": text}
    admitted = rules.validate_create(body, rules.Limits())
    assert not isinstance(admitted, ApiError), admitted
    return admitted.admitted_record(Admission._stamp(f"session_{uuid.uuid4().hex}", "fp",
                                                     "default"))


# A lone surrogate escaped in JSON (``\\udfff``) decodes to a Python string no store and no
# topic can encode as UTF-8: a record of the right schema that can never be written.
SURROGATE = "\udfff"


async def test_storage_dead_letters_an_input_it_cannot_encode_and_goes_on(
        make_system: SystemFactory, producer: AIOKafkaProducer) -> None:
    """(FerretDB stores a document over 16 MiB that an insert brings, so on this stack storage
    has no too-large record; MongoDB refuses it, ``BSONObjectTooLarge``, classified the same:
    tests/unit/test_failures.py.)"""
    system = await make_system(services=("storage",), topic_partitions=1)
    t = system.topics
    bad, good = _admitted("placeholder"), _admitted("after the bad one")
    bad["messages"][0]["content"][0]["text"] = f"cannot be encoded {SURROGATE}"
    bad_value = json.dumps(bad).encode()  # ASCII JSON: the surrogate travels escaped
    started = time.monotonic()
    await producer.send_and_wait(t.session_admitted, bad_value, key=bad["session_id"].encode())
    await producer.send_and_wait(t.session_admitted, encode(good),
                                 key=good["session_id"].encode())
    turn = await system.items.wait_for(good["session_id"], lambda it: it["type"] == "turn",
                                       timeout=DLQ_WITHIN_S)
    assert turn["state"] == "started"  # the record behind it was stored
    d = await _dead_lettered(system.settings, t.session_admitted, bad_value)
    print(f"\n[no-stall] storage: dead-lettered and past it in {time.monotonic() - started:.1f} s")
    assert d["reason"] == UNPROCESSABLE and "surrogates not allowed" in d["detail"], d["detail"]
    assert bad["session_id"] not in system.items.by_session  # nothing of it published


async def test_the_dispatcher_dead_letters_an_input_it_cannot_queue_and_goes_on(
        make_system: SystemFactory, producer: AIOKafkaProducer) -> None:
    """The issue's finding: a stored input too large for the dispatcher's queue document
    (``DocumentTooLarge: update command document too large``) was retried for ever."""
    system = await make_system(services=("dispatcher",), topic_partitions=1)
    t = system.topics
    rt = await system.runtime("codex")
    sid_huge, sid_good = f"session_{uuid.uuid4().hex}", f"session_{uuid.uuid4().hex}"

    def stored(sid: str, harness: str, text: str) -> Json:
        return {"schema": records.STORED, "session_id": sid, "harness": harness,
                "placement": "none", "turn_id": f"turn_{uuid.uuid4().hex}", "kind": "start",
                "event_id": f"evt_{uuid.uuid4().hex}", "item_ids": ["item_1"],
                "has_images": False,
                "messages": [{"role": "user", "content": [{"type": "input_text",
                                                           "text": text}]}]}

    # no claude_code Runtime: the input is queued, and its queue document is too large
    huge = encode(stored(sid_huge, "claude_code", _noise(HUGE)))
    good = stored(sid_good, "codex", "behind the huge one")
    started = time.monotonic()
    await producer.send_and_wait(t.session_stored, huge, key=sid_huge.encode())
    await producer.send_and_wait(t.session_stored, encode(good), key=sid_good.encode())
    delivery = await rt.next_delivery(timeout=DLQ_WITHIN_S)
    assert delivery["session_id"] == sid_good
    d = await _dead_lettered(system.settings, t.session_stored, huge)
    print(f"\n[no-stall] dispatcher: dead-lettered and past it in "
          f"{time.monotonic() - started:.1f} s")
    assert d["reason"] == TOO_LARGE and "DocumentTooLarge" in d["detail"], d["detail"]
    # and its Turn failed (a fact to storage), so the Session does not wait for ever
    facts = [decode(r) for r in await read_topic(system.settings, t.core_facts)]
    failed = [f for f in facts if f.get("session_id") == sid_huge and f.get("kind") == "turn"]
    assert failed and failed[0]["state"] == "failed", facts
    assert "cannot be delivered" in failed[0]["reason"]


async def test_the_receipt_tracker_dead_letters_a_delivery_it_cannot_store_and_goes_on(
        make_system: SystemFactory, producer: AIOKafkaProducer) -> None:
    system = await make_system(services=("receipts",), topic_partitions=1)
    t = system.topics
    rt_id = f"rt_{uuid.uuid4().hex}"

    def delivery(call_id: str) -> Json:
        sid = f"session_{uuid.uuid4().hex}"
        return wire.function_result_delivery(
            delivery_id=f"dlv_{uuid.uuid4().hex}", runtime_id=rt_id, session_id=sid,
            turn_id="turn_1", call_id=call_id, name="f", success=True, output="ok", error=None)

    bad = delivery(f"call_{SURROGATE}")  # its pending document cannot be encoded
    good = delivery("call_good")
    bad_value = json.dumps(bad).encode()
    started = time.monotonic()
    for value in (bad_value, encode(good)):
        await producer.send_and_wait(t.runtime_deliveries, value, key=rt_id.encode())
    client: AsyncMongoClient[Json] = AsyncMongoClient(system.settings.mongodb_uri)
    try:
        db = client[system.settings.database_of("receipts")]
        deadline = time.monotonic() + DLQ_WITHIN_S
        pending = None
        while pending is None and time.monotonic() < deadline:
            pending = await db.pending_receipts.find_one({"session_id": good["session_id"]})
            await asyncio.sleep(0.3)
        assert pending is not None, "the delivery behind the bad one was not tracked"
    finally:
        await client.close()
    d = await _dead_lettered(system.settings, t.runtime_deliveries, bad_value)
    print(f"\n[no-stall] receipts: dead-lettered and past it in "
          f"{time.monotonic() - started:.1f} s")
    assert d["reason"] == UNPROCESSABLE and "surrogates" in d["detail"], d["detail"]


async def test_admission_dead_letters_a_session_input_it_cannot_answer_and_goes_on(
        make_system: SystemFactory, producer: AIOKafkaProducer) -> None:
    """A ``request_id`` of 20 MB: the answer (413, the body being over the limit) carries it
    twice (field and key), more than the results topic takes — it was retried for ever."""
    system = await make_system(services=("admission",), topic_partitions=1)
    t = system.topics
    rid_huge = "req-" + _noise(20 * 1024 * 1024)
    huge = encode({"op": records.OP_CREATE, "request_id": rid_huge, "harness": "codex",
                   "placement": "none", "input": "x"})
    rid_good = f"req-{uuid.uuid4().hex}"
    good = encode({"op": "sessions.nothing", "request_id": rid_good})  # answered 400
    started = time.monotonic()
    await producer.send_and_wait(t.session_input, huge, key=b"k")
    await producer.send_and_wait(t.session_input, good, key=b"k")
    answer = None
    deadline = time.monotonic() + DLQ_WITHIN_S
    while answer is None and time.monotonic() < deadline:
        for raw in await read_topic(system.settings, t.session_input_results):
            v = decode(raw)
            if v.get("request_id") == rid_good:
                answer = v
        await asyncio.sleep(0.3)
    assert answer is not None and answer["status"] == 400, answer
    d = await _dead_lettered(system.settings, t.session_input, huge)
    print(f"\n[no-stall] admission: dead-lettered and past it in "
          f"{time.monotonic() - started:.1f} s")
    assert d["reason"] == TOO_LARGE and "MessageSizeTooLarge" in d["detail"], d["detail"]


# ---- the must-show: the largest admitted body, then tenant B --------------------------------
KEY_A, KEY_B = f"a-{uuid.uuid4().hex}", f"b-{uuid.uuid4().hex}"
BIND_TIMEOUT_S = 20.0


def _client(system: System, key: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=system.admission.http),
                             base_url="http://core", timeout=120,
                             headers={"Authorization": f"Bearer {key}"})


def _largest_text() -> str:
    """The text whose admitted record is just within ``STORED_FORM_MAX_BYTES`` (the record's
    envelope — ids, timestamps, fingerprint — is well under 2 KiB)."""
    return _noise(STORED_FORM_MAX_BYTES - 2048)


# it bounds wall time under the load it makes itself (a 16 MB body through every service in
# this process, tenant B answered within the bind timeout): run alone, after the parallel run
@pytest.mark.timing
async def test_the_largest_admitted_body_flows_through_and_tenant_b_is_answered_in_time(
        make_system: SystemFactory) -> None:
    keys = f"{key_entry('tenantA', KEY_A)},{key_entry('tenantB', KEY_B)}"
    system = await make_system(topic_partitions=1, auth_disabled=False, api_keys=keys,
                               binding_wait_timeout_s=BIND_TIMEOUT_S)
    runtime = RuntimeService(system.settings, RuntimeConfig(
        runtime_id=f"rt_{uuid.uuid4().hex}", harness="codex", placements=["none"],
        turn_idle_s=0.5))
    await runtime.start()
    a, b = _client(system, KEY_A), _client(system, KEY_B)
    try:
        # over the body limit (the 32 MiB) and over the stored form: 413, nothing written
        before = await store_counts(system.settings)
        admitted_before = len(await read_topic(system.settings, system.topics.session_admitted))
        for size in (32 * 1024 * 1024, STORED_FORM_MAX_BYTES + 1):
            r = await a.post("/v1/sessions", json={"harness": "codex", "placement": "none",
                                                   "input": "x" * size})
            assert r.status_code == 413, r.text[:300]
            err = r.json()["error"]
            assert err["type"] == "request_too_large"
            assert err["param"] == ("input" if size == STORED_FORM_MAX_BYTES + 1 else None)
        assert await store_counts(system.settings) == before
        assert len(await read_topic(system.settings,
                                    system.topics.session_admitted)) == admitted_before

        # the largest admitted body: stored, bound, delivered, its Turn ends
        text = _largest_text()
        started = time.monotonic()
        r = await a.post("/v1/sessions", json={"harness": "codex", "placement": "none",
                                               "input": text})
        assert r.status_code == 201, r.text[:300]
        sid_a = r.json()["id"]
        assert r.json()["items"][0]["content"][0]["text"] == text  # stored exactly as sent
        await system.items.wait_for(
            sid_a, lambda it: it["type"] == "turn" and it["state"] == "completed", timeout=120)
        took_a = time.monotonic() - started

        # tenant B, right after: bound and answered within the bind timeout
        started = time.monotonic()
        r = await b.post("/v1/sessions", json={"harness": "codex", "placement": "none",
                                               "input": "hello from tenant B"})
        assert r.status_code == 201, r.text
        sid_b = r.json()["id"]
        await system.items.wait_for(
            sid_b, lambda it: it["type"] == "turn" and it["state"] == "completed",
            timeout=BIND_TIMEOUT_S)
        took_b = time.monotonic() - started
        got = (await b.get(f"/v1/sessions/{sid_b}")).json()
        assert got["runtime_id"] == runtime.config.runtime_id
        assert got["status"] != "waiting_for_runtime"
        print(f"\n[no-stall] largest admitted input: {len(text)} B of text, its Turn completed "
              f"in {took_a:.1f} s; tenant B's in {took_b:.1f} s (bind timeout "
              f"{BIND_TIMEOUT_S:g} s)")
        # no consumer dead-lettered anything of it
        for topic in (system.topics.session_admitted, system.topics.session_stored):
            assert await read_topic(system.settings, f"{topic}.dlq") == []
    finally:
        await a.aclose()
        await b.aclose()
        with contextlib.suppress(Exception):
            await runtime.stop()


# make test-slow: a late read of the bind wait; the rule's main proof:
# test_dispatcher.py::test_no_eligible_runtime_within_the_wait_fails_the_turn
@pytest.mark.slow
async def test_the_bind_timeout_fires_for_an_input_the_dispatcher_reads_late(
        make_system: SystemFactory) -> None:
    """A dispatcher that is behind (here: not running while the input waits) fails an input
    that already waited past the bind timeout soon after it reads it — the wait counts from when
    storage published it, not from the read (before: a whole timeout more after the read)."""
    timeout_s = 20.0
    system = await make_system(services=("storage", "admission"), topic_partitions=1,
                               binding_wait_timeout_s=timeout_s)
    r = await system.create("claude_code", "no Runtime will take this")  # none registered
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    await system.items.wait_for(sid, lambda it: it["type"] == "turn")  # stored, published
    await asyncio.sleep(timeout_s + 1)  # the input waits past the timeout, unread
    started = time.monotonic()
    await system.dispatcher.start()
    try:
        failed = await system.items.wait_for(
            sid, lambda it: it["type"] == "turn" and it["state"] == "failed",
            timeout=timeout_s - 5)  # well before a timeout counted from the read
        took = time.monotonic() - started
    finally:
        await system.dispatcher.stop()
    assert f"no eligible Runtime within {timeout_s:g} s" in failed["reason"], failed
    print(f"\n[no-stall] an input read {timeout_s + 1:g} s late failed {took:.1f} s after the "
          f"dispatcher started (bind timeout {timeout_s:g} s)")

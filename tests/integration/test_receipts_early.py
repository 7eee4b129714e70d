"""An observation that overtakes its call's delivery record.

The Runtime's receipt (or refusal) of call B and the dispatcher's delivery record of B travel on
two topics, read by two consumers: the receipt can be read first. Per seed, the verdict of B
depends on the receipt, not on the order the tracker reads the two records in: an exact receipt
inside the window means ``applied``, a refusal means ``failed`` — whether or not another call of
the same Session (A) is pending at that moment.

The tracker is driven through its two record handlers in the order under test (the receipt,
printed 10 ms after B was handed over, is read ~50 ms before B's delivery record is consumed)
over the real Kafka and store; the verdicts are read from ``core.facts`` by an independent
consumer."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from services.receipts.app import ReceiptService
from shared.kafka import decode, encode, ensure_topics
from shared.settings import Settings
from shared.topics import topics_for

pytestmark = pytest.mark.integration

Json = dict[str, Any]
NATIVE = "native-early"
RT = "rt_1"  # the Runtime the results are delivered to, whose observations alone count


def delivery(sid: str, cid: str) -> Json:
    return {"schema": "runtime.delivery/1", "delivery_id": f"dlv_{cid}", "runtime_id": RT,
            "session_id": sid, "turn_id": "turn_1", "call_id": cid,
            "kind": "function_result", "name": "f", "success": True,
            "content": [{"type": "input_text", "text": f"result of {cid}"}]}


def receipt(sid: str, cid: str) -> Json:
    return {"schema": "runtime.observation/1", "session_id": sid, "harness": "claude_code",
            "runtime_id": RT,
            "native": {"type": "user", "uuid": uuid.uuid4().hex, "session_id": NATIVE,
                       "parent_tool_use_id": None, "isReplay": False, "isSynthetic": False,
                       "message": {"role": "user", "content": [{
                           "type": "tool_result", "tool_use_id": cid, "is_error": False,
                           "content": [{"type": "text", "text": f"result of {cid}"}]}]}}}


def announced(sid: str, *cids: str) -> Json:
    """The harness's function calls, as the tracker learns them from the observation stream."""
    return {"schema": "runtime.observation/1", "session_id": sid, "harness": "claude_code",
            "runtime_id": RT,
            "native": {"type": "assistant", "uuid": uuid.uuid4().hex, "session_id": NATIVE,
                       "parent_tool_use_id": None, "message": {"role": "assistant", "content": [
                           {"type": "tool_use", "id": c, "name": "f", "input": {}}
                           for c in cids]}}}


def refusal(sid: str, cid: str) -> Json:
    return {"schema": "runtime.observation/1", "session_id": sid, "harness": "claude_code",
            "runtime_id": RT,
            "native": None, "refusal": {"delivery_id": "dlv_x", "kind": "function_result",
                                        "reason": "no pending call", "terminal": True,
                                        "call_id": cid}}


@pytest.mark.parametrize(("a_pending", "early", "want"), [
    (True, "receipt", "applied"),
    (True, "refusal", "failed"),
    (False, "receipt", "applied"),
    (False, "refusal", "failed"),
])
async def test_observation_before_delivery(settings: Settings, a_pending: bool, early: str,
                                           want: str) -> None:
    s = settings.model_copy(update={"receipt_window_s": 2.0})
    topics = topics_for(s)
    await ensure_topics(s, topics)
    svc = ReceiptService(s)
    await svc.start()
    facts = AIOKafkaConsumer(topics.core_facts, bootstrap_servers=s.kafka_bootstrap_servers,
                             group_id=f"t-{uuid.uuid4().hex}", auto_offset_reset="earliest")
    await facts.start()
    try:
        sid = f"session_{uuid.uuid4().hex}"
        a, b = "call_a", "call_b"
        await svc.tracker.observe_batch([(announced(sid, a, b), time.time())])
        if a_pending:
            await svc.tracker.open_call(delivery(sid, a), time.time())
            assert (sid, a) in svc.tracker.calls
        handed = time.time()  # B's delivery handed over: its record's timestamp
        await asyncio.sleep(0.01)
        obs = receipt(sid, b) if early == "receipt" else refusal(sid, b)
        await svc.tracker.observe(obs, time.time(), observed_ts=time.time())
        await asyncio.sleep(0.05)
        # B's delivery record consumed 50 ms after the observation printed after it
        await svc.tracker.open_call(delivery(sid, b), handed)

        seen: dict[str, Json] = {}
        # until both verdicts are read (A's comes after its 2 s window), on a loaded broker
        end = time.monotonic() + 60.0
        while time.monotonic() < end and len(seen) < (2 if a_pending else 1):
            for recs in (await facts.getmany(timeout_ms=300)).values():
                for r in recs:
                    f = decode(r.value)
                    if f.get("kind") == "application":
                        seen[f["call_id"]] = f
        assert b in seen, seen
        assert seen[b]["state"] == want, seen[b]
        if a_pending:
            # B's receipt is B's, never A's: A still times out
            assert seen[a]["state"] == "uncertain", seen.get(a)
    finally:
        await facts.stop()
        await svc.stop()


@pytest.mark.parametrize("down_s", [0.0, 3.0], ids=["restart-at-once", "down-past-window"])
async def test_an_early_receipt_survives_a_tracker_crash(settings: Settings,
                                                         down_s: float) -> None:
    """The receipt is read (its offset committed with its batch) before the call's delivery;
    the tracker then dies (kill -9: nothing of its memory survives) and a new one reads the
    delivery. Kafka will not send the receipt again, so the kept observation must come back
    from the store: the call ends ``applied``, not ``uncertain`` (without the store copy it
    ends ``uncertain``).

    ``down-past-window``: the tracker stays down longer than the window after the receipt, so
    the delivery is read overdue. The receipt still counts: a kept observation is dropped only
    once the deliveries read cover its time, not one window after it by the clock."""
    s = settings.model_copy(update={"receipt_window_s": 2.0})
    topics = topics_for(s)
    await ensure_topics(s, topics)
    first = ReceiptService(s)
    await first.start()
    sid, b = f"session_{uuid.uuid4().hex}", "call_b"
    # the consumer's batch path: learn, observe, then persist before the offsets commit
    receipt_at = time.time()
    await first.tracker.observe_batch([(announced(sid, b), receipt_at - 0.02),
                                       (receipt(sid, b), receipt_at)])
    for task in first.tasks:  # a crash: no orderly stop of the tracker
        task.cancel()
    await first.broker.stop()
    await first.client.close()
    await asyncio.sleep(down_s)  # the time no tracker runs: part of the scenario

    # B's delivery, handed over just before the receipt was printed, read only by the new one
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap_servers)
    await producer.start()
    try:
        await producer.send_and_wait(
            topics.runtime_deliveries, encode({**delivery(sid, b), "delivery_id": "dlv_b",
                                               "runtime_id": "rt_1"}),
            key=sid.encode(), timestamp_ms=int((receipt_at - 0.01) * 1000))
    finally:
        await producer.stop()
    second = ReceiptService(s)
    await second.start()
    facts = AIOKafkaConsumer(topics.core_facts, bootstrap_servers=s.kafka_bootstrap_servers,
                             group_id=f"t-{uuid.uuid4().hex}", auto_offset_reset="earliest")
    await facts.start()
    try:
        seen: dict[str, Json] = {}
        end = time.monotonic() + 60.0
        while time.monotonic() < end and b not in seen:
            for recs in (await facts.getmany(timeout_ms=300)).values():
                for r in recs:
                    f = decode(r.value)
                    if f.get("kind") == "application" and f.get("session_id") == sid:
                        seen[f["call_id"]] = f
        assert seen.get(b, {}).get("state") == "applied", seen
    finally:
        await facts.stop()
        await second.stop()

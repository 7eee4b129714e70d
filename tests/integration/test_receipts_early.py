"""An observation that overtakes its call's delivery record (issue 17 item 2).

The Runtime's receipt (or refusal) of call B and the dispatcher's delivery record of B travel on
two topics, read by two consumers: the receipt can be read first. Per seed, the verdict of B
depends on the receipt, not on the order the tracker reads the two records in: an exact receipt
inside the window means ``applied``, a refusal means ``failed`` — whether or not another call of
the same Session (A) is pending at that moment.

The tracker is driven through its two record handlers in the order under test (receipt ~50 ms
before B's delivery is consumed) over the real Kafka and store; the verdicts are read from
``core.facts`` by an independent consumer."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from services.receipts.app import ReceiptService
from shared.kafka import decode, ensure_topics
from shared.settings import Settings
from shared.topics import topics_for

pytestmark = pytest.mark.integration

Json = dict[str, Any]
NATIVE = "native-early"


def delivery(sid: str, cid: str) -> Json:
    return {"schema": "runtime.delivery/1", "session_id": sid, "call_id": cid,
            "kind": "function_result", "name": "f", "success": True,
            "content": [{"type": "input_text", "text": f"result of {cid}"}]}


def receipt(sid: str, cid: str) -> Json:
    return {"schema": "runtime.observation/1", "session_id": sid, "harness": "claude_code",
            "native": {"type": "user", "uuid": uuid.uuid4().hex, "session_id": NATIVE,
                       "parent_tool_use_id": None, "isReplay": False, "isSynthetic": False,
                       "message": {"role": "user", "content": [{
                           "type": "tool_result", "tool_use_id": cid, "is_error": False,
                           "content": [{"type": "text", "text": f"result of {cid}"}]}]}}}


def refusal(sid: str, cid: str) -> Json:
    return {"schema": "runtime.observation/1", "session_id": sid, "harness": "claude_code",
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
        await svc.db.sessions.insert_one({"_id": sid, "harness": "claude_code"})
        await svc.db.calls.insert_many([{"_id": f"{sid}/{c}", "name": "f",
                                         "native": {"session_id": NATIVE}} for c in (a, b)])
        if a_pending:
            await svc.open_call(delivery(sid, a), time.time())
            assert (sid, a) in svc.calls
        obs = receipt(sid, b) if early == "receipt" else refusal(sid, b)
        await svc.observe(obs, time.time(), observed_ts=time.time())
        await asyncio.sleep(0.05)
        await svc.open_call(delivery(sid, b), time.time())  # B's delivery consumed 50 ms later

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


async def test_an_early_receipt_survives_a_tracker_crash(settings: Settings) -> None:
    """The receipt is read (its offset committed with its batch) before the call's delivery;
    the tracker then dies (kill -9: nothing of its memory survives) and a new one reads the
    delivery. Kafka will not send the receipt again, so the kept observation must come back
    from the store: the call ends ``applied``, not ``uncertain`` (found by the chaos suite's
    kill -9 receipts row; seen failing without the store copy: 'uncertain' == 'applied')."""
    s = settings.model_copy(update={"receipt_window_s": 5.0})
    topics = topics_for(s)
    await ensure_topics(s, topics)
    first = ReceiptService(s)
    await first.start()
    sid, b = f"session_{uuid.uuid4().hex}", "call_b"
    await first.db.sessions.insert_one({"_id": sid, "harness": "claude_code"})
    await first.db.calls.insert_one({"_id": f"{sid}/{b}", "name": "f",
                                     "native": {"session_id": NATIVE}})
    # the consumer's batch path: observe, then persist before the offsets commit
    await first.observe(receipt(sid, b), time.time(), observed_ts=time.time())
    await first._save_early()
    if first.timer:  # a crash: no orderly stop of the tracker
        first.timer.cancel()
    await first.broker.stop()
    await first.client.close()

    second = ReceiptService(s)
    await second.start()
    facts = AIOKafkaConsumer(topics.core_facts, bootstrap_servers=s.kafka_bootstrap_servers,
                             group_id=f"t-{uuid.uuid4().hex}", auto_offset_reset="earliest")
    await facts.start()
    try:
        await second.open_call(delivery(sid, b), time.time())
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

"""Two receipt-tracker replicas that both hold the same pending call (an overlap during a
rebalance, or a redelivery to the other replica) publish one verdict between them: the verdict
is claimed in the store first, and whoever loses the claim republishes the *claimed* verdict
under the same fact id, which storage applies once."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer

from services.receipts.app import ReceiptService
from shared.kafka import decode, ensure_topics
from shared.settings import Settings
from shared.topics import topics_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)


async def test_two_replicas_one_verdict_per_call(settings: Settings) -> None:
    # 10 s: opening and confirming 20 calls on both replicas must fit in the window on a loaded
    # machine (with 1.5 s the confirmations could arrive after it: "uncertain", a timing flake)
    s = settings.model_copy(update={"receipt_window_s": 10.0})
    topics = topics_for(s)
    await ensure_topics(s, topics)
    a, b = ReceiptService(s), ReceiptService(s)
    await a.start()
    await b.start()
    facts = AIOKafkaConsumer(topics.core_facts, bootstrap_servers=s.kafka_bootstrap_servers,
                             group_id=f"t-{uuid.uuid4().hex}", auto_offset_reset="earliest")
    await facts.start()
    try:
        sid = f"session_{uuid.uuid4().hex}"
        calls = [f"call_{i}" for i in range(20)]
        confirmed = set(calls[:10])
        # the calls as the harness announces them (the store they learn them into is shared)
        await a.tracker.learn([{
            "schema": "runtime.observation/1", "session_id": sid, "harness": "claude_code",
            "native": {"type": "assistant", "uuid": uuid.uuid4().hex, "session_id": "native-1",
                       "parent_tool_use_id": None, "message": {"role": "assistant", "content": [
                           {"type": "tool_use", "id": cid, "name": "f", "input": {}}
                           for cid in calls]}}}])
        handed = time.time()
        for cid in calls:
            rec = {"schema": "runtime.delivery/1", "session_id": sid, "call_id": cid,
                   "kind": "function_result", "name": "f", "success": True,
                   "content": [{"type": "input_text", "text": "x"}]}
            # both replicas hold the call, with the same handed-over time
            await asyncio.gather(a.tracker.open_call(rec, handed),
                                 b.tracker.open_call(rec, handed))
        # replica A alone sees the native receipt of half the calls; B times them out
        async def confirm(cid: str) -> None:
            await a.tracker.observe({
                "schema": "runtime.observation/1", "session_id": sid, "harness": "claude_code",
                "native": {"type": "user", "uuid": uuid.uuid4().hex, "session_id": "native-1",
                           "parent_tool_use_id": None, "isReplay": False, "isSynthetic": False,
                           "message": {"role": "user", "content": [{
                               "type": "tool_result", "tool_use_id": cid, "is_error": False,
                               "content": [{"type": "text", "text": "x"}]}]}}}, time.time())

        await asyncio.gather(*(confirm(cid) for cid in confirmed))
        seen: dict[str, list[dict[str, object]]] = {}
        # collect until every call has a verdict (on a loaded broker the group join alone can
        # take seconds), then 4 s more, long enough to see any second verdict
        end, settle = time.monotonic() + 90, None
        while time.monotonic() < (settle or end):
            batch = await facts.getmany(timeout_ms=500)
            for recs in batch.values():
                for r in recs:
                    f = decode(r.value)
                    if f.get("kind") == "application":
                        seen.setdefault(f["call_id"], []).append(f)
            if settle is None and len(seen) == len(calls):
                settle = time.monotonic() + 4
        assert sorted(seen) == sorted(calls)
        for cid, published in seen.items():
            # a call may be published twice (the loser republishes the claim), but every copy
            # is the same fact: same id, same verdict — storage applies it once
            assert {p["fact_id"] for p in published} == {f"rcpt:{sid}/{cid}"}
            assert {(p["state"], p["reason"]) for p in published} == {
                (published[0]["state"], published[0]["reason"])}
            # B lost the claim for the confirmed calls: it never says "uncertain" about them
            assert published[0]["state"] == ("applied" if cid in confirmed else "uncertain")
        claims = await a.db.receipt_verdicts.count_documents({})
        assert claims == len(calls)
    finally:
        await facts.stop()
        await a.stop()
        await b.stop()

"""Poison records on every topic a service consumes, over the real stack.

One partition per topic, so every poison record is followed, in its partition, by the good
records the test sends after it. For each consumed topic the test checks:
  * a ``dlq.record/1`` on ``<topic>.dlq`` per consumer of that topic, with the reason code, the
    original value and key bytes, partition and offset;
  * the good records after it were processed (an observable effect per topic, and every
    consumer group's committed offset past them);
  * ``session_core_dlq_records_total{topic, reason}`` went up (read from the /metrics text);
  * the services are still alive (readiness, consumer tasks running).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from collections import Counter as Tally
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtimes.app import RuntimeConfig, RuntimeService, consumer_group
from shared import records
from shared.domain.poison import INVALID_FIELDS, UNDECODABLE, UNEXPECTED_SCHEMA
from shared.kafka import decode, encode
from shared.settings import Settings
from tests.support.builders import msg, text
from tests.support.kafka import read_records
from tests.support.system import System, SystemFactory

pytestmark = pytest.mark.integration

Json = dict[str, Any]
RT = "rt_" + "e" * 32
SID = "session_" + "f" * 32


@dataclass
class Sent:
    topic: str
    value: bytes
    key: bytes | None
    partition: int
    offset: int
    reason: str
    consumers: int  # how many consumers dead-letter it (one DLQ record each)


_REG = {"schema": records.REGISTRATION, "runtime_id": "rt_x", "harness": "codex",
        "bridge_protocol": 3, "status": "ready", "placements": ["none"],
        "capabilities": {"message_images": True, "function_result_images": True},
        "heartbeat_at": "2026-01-01T00:00:00Z"}
REG_BAD_STATUS = encode({**_REG, "status": "exploded"})
REG_BAD_PLACEMENTS = encode({**_REG, "runtime_id": "rt_z", "placements": ["none", 3]})
OBS_BAD_REFUSAL = encode({"schema": records.OBSERVATION, "runtime_id": RT, "session_id": SID,
                          "harness": "codex", "observed_at": "2026-01-01T00:00:00Z",
                          "native": None, "refusal": "refused"})
STORED_BAD_KIND = encode({"schema": records.STORED, "session_id": SID, "event_id": "evt_x",
                          "harness": "codex", "placement": "none", "kind": "resume"})
# what the DLQ record's detail names, for the records the typed decoders refuse
DETAIL = {
    REG_BAD_STATUS: "runtime.registration/1: status: Input should be 'ready'",
    REG_BAD_PLACEMENTS: "runtime.registration/1: placements.1: Input should be 'none'",
    OBS_BAD_REFUSAL: "refusal",
    STORED_BAD_KIND: "session.stored/1: record: Input tag 'resume'",
}


def _poison(t: Any) -> list[tuple[str, bytes, bytes | None, str, int]]:
    """(topic, value, key, expected reason code, consumers that dead-letter it)."""
    obs_bad = encode({"schema": records.OBSERVATION, "runtime_id": 7, "session_id": SID})
    return [
        (t.session_input, b"\xff\xfe{not json", b"k", UNDECODABLE, 1),
        (t.session_input, encode({"op": "sessions.create", "harness": "codex"}), b"k",
         INVALID_FIELDS, 1),  # no request_id: the answer could not be addressed
        (t.session_admitted, b"not json at all", SID.encode(), UNDECODABLE, 1),
        (t.session_admitted, encode({"schema": records.ADMITTED, "op": "sessions.create",
                                     "session_id": SID}), SID.encode(), INVALID_FIELDS, 1),
        (t.core_facts, encode({"schema": "core.fact/99", "session_id": SID}), SID.encode(),
         UNEXPECTED_SCHEMA, 1),
        (t.core_facts, encode({"schema": records.FACT, "fact_id": 1, "session_id": SID,
                               "kind": "turn"}), SID.encode(), INVALID_FIELDS, 1),
        # storage, the receipt tracker and the dispatcher each read observations
        (t.runtime_observations, obs_bad, SID.encode(), INVALID_FIELDS, 3),
        (t.runtime_observations, b'{"schema": NaN}', SID.encode(), UNDECODABLE, 3),
        (t.session_stored, encode({"schema": records.STORED, "session_id": SID}), SID.encode(),
         INVALID_FIELDS, 1),
        (t.session_stored, encode([1, 2, 3]), SID.encode(), UNDECODABLE, 1),
        (t.runtime_registrations, REG_BAD_STATUS, b"rt_x", INVALID_FIELDS, 1),
        (t.runtime_registrations, REG_BAD_PLACEMENTS, b"rt_z", INVALID_FIELDS, 1),
        (t.runtime_observations, OBS_BAD_REFUSAL, SID.encode(), INVALID_FIELDS, 3),
        (t.session_stored, STORED_BAD_KIND, SID.encode(), INVALID_FIELDS, 1),
        (t.runtime_registrations, encode({"runtime_id": "rt_y"}), b"rt_y", "missing_schema", 1),
        # the receipt tracker and the Runtime it is keyed to
        (t.runtime_deliveries, encode({"schema": records.DELIVERY, "runtime_id": RT,
                                       "session_id": SID, "delivery_id": "d1",
                                       "kind": "function_result"}), RT.encode(),
         INVALID_FIELDS, 2),
        (t.runtime_deliveries, b"\x00\x01binary", RT.encode(), UNDECODABLE, 2),
        (t.runtime_control, encode({"schema": records.CONTROL, "runtime_id": RT,
                                    "set": "everything"}), RT.encode(), INVALID_FIELDS, 1),
        (t.runtime_control, encode({"schema": records.CONTROL, "runtime_id": RT,
                                    "set": {"no_such_switch": True}}), RT.encode(),
         "unprocessable", 1),
        (t.session_items, b"{\"schema\": \"session.item/1\", \"sequence\": \"one\"}",
         SID.encode(), INVALID_FIELDS, 1),
        (t.storage_replies, b"]]", b"req_x", UNDECODABLE, 1),
    ]


def _metrics(text: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.name == "session_core_dlq_records":
            for s in fam.samples:
                if s.name.endswith("_total"):
                    out[(s.labels["topic"], s.labels["reason"])] = s.value
    return out


async def _dlq_records(settings: Settings, topic: str, want: int,
                       timeout: float = 60) -> list[Json]:
    return await read_records(settings, f"{topic}.dlq", want, timeout)


async def _committed(settings: Settings, group: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    meta = offsets.get(TopicPartition(topic, 0))
    return -1 if meta is None else int(meta.offset)


async def _committed_past(settings: Settings, group: str, topic: str, offset: int,
                          timeout: float = 30) -> int:
    """The group's committed offset once it is past ``offset`` (or what it is at the end)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    committed = await _committed(settings, group, topic)
    while committed <= offset and loop.time() < end:
        await asyncio.sleep(0.5)
        committed = await _committed(settings, group, topic)
    return committed


@pytest.fixture
async def system(make_system: SystemFactory) -> System:
    return await make_system(topic_partitions=1, binding_wait_timeout_s=30.0)


async def test_poison_on_every_consumed_topic_is_dead_lettered_and_skipped(
        system: System) -> None:
    settings, t = system.settings, system.topics
    assert system.http is not None
    before = _metrics(generate_latest().decode())  # this process's registry: every service

    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
    await producer.start()
    runtime: RuntimeService | None = None
    results = AIOKafkaConsumer(t.session_input_results,
                               bootstrap_servers=settings.kafka_bootstrap_servers,
                               group_id=None, auto_offset_reset="earliest")
    await results.start()
    try:
        # ---- poison first, on every consumed topic ----------------------------------------
        sent: list[Sent] = []
        for topic, value, key, reason, consumers in _poison(t):
            md = await producer.send_and_wait(topic, value, key=key)
            sent.append(Sent(topic, value, key, md.partition, md.offset, reason, consumers))
        # ---- then good records behind them ------------------------------------------------
        # a good control record, then the reference Runtime (it folds control on start)
        await producer.send_and_wait(t.runtime_control, encode(
            {"schema": records.CONTROL, "runtime_id": RT, "set": {"receipt_delay_s": 0.01}}),
            key=RT.encode())
        runtime = RuntimeService(settings, RuntimeConfig(runtime_id=RT, harness="codex",
                                                         placements=["none"], turn_idle_s=0.5))
        await runtime.start()
        assert runtime.harness.switches.active() == {"receipt_delay_s": 0.01}  # control read

        # session.input → an answer on session.input.results
        rid = f"req-{uuid.uuid4().hex}"
        await producer.send_and_wait(t.session_input, encode({
            "op": records.OP_CREATE, "request_id": rid, "harness": "codex",
            "placement": "none", "input": "hello over kafka"}), key=rid.encode())
        answer: Json | None = None
        async with asyncio.timeout(60):
            while answer is None:
                for recs in (await results.getmany(timeout_ms=500)).values():
                    for r in recs:
                        v = decode(r.value)
                        if v.get("request_id") == rid:
                            answer = v
        assert answer["status"] == 201, answer  # admitted → stored → replied (replies tail)
        sid_kafka = answer["body"]["id"]

        # HTTP: create, then an event that waits for its Turn (the admission Item tail)
        created = await system.create("codex", "hello over http")
        assert created.status_code == 201, created.text
        sid = created.json()["id"]
        waited = await system.event(
            sid, {"type": records.EV_MESSAGE, "input": [msg(text("and again"))]},
            wait="true", timeout_ms="60000")
        assert waited.status_code in (200, 202), waited.text
        # Turns ran: session.stored → dispatcher → runtime.deliveries → Runtime →
        # runtime.observations → storage (and core.facts from the dispatcher) → Items
        for s in (sid_kafka, sid):
            turn = await system.items.wait_for(
                s, lambda it: it["type"] == "turn" and it["state"] == "completed", timeout=60)
            assert turn["session_id"] == s
        assert RT in system.dispatcher.registry.runtimes  # the registry tail moved on

        # ---- every poison record is on its DLQ, with reason and original bytes ---------------
        by_topic: dict[str, list[Sent]] = {}
        for p in sent:
            by_topic.setdefault(p.topic, []).append(p)
        table: list[tuple[str, int, int]] = []
        for topic, ps in by_topic.items():
            want = sum(p.consumers for p in ps)
            dlq = await _dlq_records(settings, topic, want)
            for p in ps:
                mine = [d for d in dlq
                        if base64.b64decode(d["value_b64"]) == p.value and d["offset"] == p.offset]
                assert len(mine) == p.consumers, (topic, p.value, dlq)
                for d in mine:
                    assert d["schema"] == "dlq.record/1" and d["source_topic"] == topic
                    assert d["reason"] == p.reason, (topic, p.value, d)
                    assert d["detail"]
                    assert DETAIL.get(p.value, "") in d["detail"], (topic, d)
                    assert d["partition"] == p.partition
                    assert base64.b64decode(d["key_b64"]) == p.key
            table.append((topic, len(ps), len(dlq)))

        # ---- consumer groups moved past the poison ---------------------------------------
        groups = [
            ("session-core-admission", t.session_input),
            ("session-core-storage", t.session_admitted),
            ("session-core-storage", t.core_facts),
            ("session-core-storage", t.runtime_observations),
            ("session-core-dispatcher", t.session_stored),
            ("session-core-dispatcher-observations", t.runtime_observations),
            ("session-core-receipts", t.runtime_deliveries),
            ("session-core-receipts-observations", t.runtime_observations),
            (consumer_group(RT), t.runtime_deliveries),
        ]
        last_poison = {topic: max(p.offset for p in ps) for topic, ps in by_topic.items()}
        for group, topic in groups:
            committed = await _committed_past(settings, t.group(group), topic,
                                              last_poison[topic] + 1)
            assert committed > last_poison[topic] + 1, (group, topic)  # a good one after it

        # ---- the metric counted every one --------------------------------------------------
        after = _metrics(generate_latest().decode())
        expected = Tally[tuple[str, str]]()
        for p in sent:
            expected[(p.topic, p.reason)] += p.consumers
        for label, n in expected.items():
            assert after.get(label, 0) - before.get(label, 0) == n, (label, after, before)

        # ---- and everything is still alive ------------------------------------------------
        assert (await system.http.get("/readyz")).status_code == 200
        assert await system.storage.ready() and await system.dispatcher.ready()
        assert await system.receipts.ready()
        for tail in (system.admission.items, system.admission.replies,
                     system.dispatcher.registry):
            assert tail.task is not None and not tail.task.done()
        assert all(not task.done() for task in runtime._tasks)
        print("\n[poison] topic | poison records | DLQ records")
        for row in table:
            print("[poison]", *row)
    finally:
        if runtime is not None:
            with contextlib.suppress(Exception):
                await runtime.stop()
        await results.stop()
        await producer.stop()


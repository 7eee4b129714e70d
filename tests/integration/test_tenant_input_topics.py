"""Tenants on Kafka (issue 62, part 3), on the real stack: with ``SESSION_CORE_INPUT_TENANTS``
each tenant has its own ``session.input.<tenant>`` and ``session.input.results.<tenant>``. A
record there is that tenant's whatever it writes: one that names another tenant is answered 400
(``param: tenant``) on its own results topic, dead-lettered with reason ``wrong_tenant``, and
writes nothing; one that names no tenant acts for the topic's tenant only (another tenant's
Session is 404, as over HTTP). Who may write to each topic is the broker's to enforce (ACLs:
tests/faults/test_kafka_acls.py); this is the part Core enforces (docs/security.md)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from shared.kafka import encode
from shared.settings import Settings
from shared.topics import input_tenants, topics_for
from tests.support.kafka import read_records
from tests.support.system import SystemFactory

pytestmark = pytest.mark.integration
Json = dict[str, Any]


async def send(settings: Settings, topic: str, rec: Json) -> None:
    p = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all")
    await p.start()
    try:
        await p.send_and_wait(topic, encode(rec), key=rec["request_id"].encode())
    finally:
        await p.stop()


def rid() -> str:
    return f"req_{uuid.uuid4().hex}"


async def test_a_record_on_a_tenants_topic_is_that_tenants(make_system: SystemFactory) -> None:
    system = await make_system(services=("storage", "admission"), http_port=0,
                               input_tenants="acme,globex")
    s, t = system.settings, system.topics
    create = {"op": "sessions.create", "request_id": rid(), "harness": "codex",
              "placement": "none", "input": "acme's own"}
    await send(s, t.tenant_input("acme"), create)
    [made] = await read_records(s, t.tenant_input_results("acme"), 1)
    assert made["status"] == 201, made
    sid = made["body"]["id"]
    state = (await system.storage.repo.sessions([sid]))[sid]
    assert state is not None and state.tenant == "acme"
    db = system.storage.repo.db
    before = await db.items.count_documents({"session_id": sid})

    # globex's producer names acme: refused, and kept in the DLQ with the reason
    forged = {"op": "events.create", "request_id": rid(), "session_id": sid, "tenant": "acme",
              "type": "agent.session.input.message",
              "input": [{"role": "user", "type": "message",
                         "content": [{"type": "input_text", "text": "transfer all funds"}]}]}
    await send(s, t.tenant_input("globex"), forged)
    # globex's producer names nobody: it acts as globex, for whom acme's Session does not exist
    unnamed = {**{k: v for k, v in forged.items() if k != "tenant"}, "request_id": rid()}
    await send(s, t.tenant_input("globex"), unnamed)
    results = await read_records(s, t.tenant_input_results("globex"), 2)
    answers = {a["request_id"]: a for a in results}
    assert answers[forged["request_id"]]["status"] == 400, answers
    assert answers[forged["request_id"]]["body"]["error"]["param"] == "tenant"
    assert answers[unnamed["request_id"]]["status"] == 404, answers
    assert answers[unnamed["request_id"]]["body"]["error"]["param"] == "session_id"
    dead = await read_records(s, t.dlq(t.tenant_input("globex")), 1)
    assert [(d["reason"], d["key"]) for d in dead] == [("wrong_tenant", forged["request_id"])]
    assert "'acme'" in dead[0]["detail"] and "'globex'" in dead[0]["detail"]
    # nothing reached acme's Session, and no answer went to the shared results topic
    assert await db.items.count_documents({"session_id": sid}) == before
    assert await read_records(s, t.session_input_results, 1, timeout=2) == []

    # acme's own producer may repeat its tenant: the event is applied
    own = {**forged, "request_id": rid(), "input": [{"role": "user", "type": "message",
                                                      "content": [{"type": "input_text",
                                                                   "text": "hello again"}]}]}
    await send(s, t.tenant_input("acme"), own)
    got = [a for a in await read_records(s, t.tenant_input_results("acme"), 2)
           if a["request_id"] == own["request_id"]]
    assert got and got[0]["status"] == 202, got


@pytest.mark.parametrize("bad", ["a.b", "results", "x y", "-x"])
def test_an_input_tenant_that_cannot_name_its_own_topics_is_refused(
        settings: Settings, bad: str) -> None:
    with pytest.raises(ValueError, match="SESSION_CORE_INPUT_TENANTS: entry 2"):
        topics_for(settings.model_copy(update={"input_tenants": f"acme,{bad}"}))
    assert input_tenants(settings.model_copy(update={"input_tenants": " acme , b_1,acme"})) == (
        "acme", "b_1")

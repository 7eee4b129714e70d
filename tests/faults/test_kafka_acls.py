"""Identities from credentials (issue 62, part 3) against a real broker with SASL and an
authorizer: a private single-node Kafka (the local stack's cached jars) whose only listener is
SASL_PLAINTEXT (PLAIN), with StandardAuthorizer and allow.everyone.if.no.acl.found=false. The
ACLs are exactly the chart's table (the kafka-acls ConfigMap rendered by Helm from values: a
principal per service, two Runtime principals, tenants acme and globex with input topics of
their own). Each forged record is refused — by the broker (TopicAuthorizationFailed) or by
Core (DLQ with the reason) — and nothing reaches the Session; the four services run under
their own principals. Marked ``faults``: it starts its own JVM (docs/security.md)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError, TopicAuthorizationFailedError

from services.admission.app import AdmissionService
from services.dispatcher.app import DispatcherService
from services.receipts.app import ReceiptService
from services.storage.app import StorageService
from shared import records
from shared.kafka import client_security, encode, ensure_topics
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.acls import add_grants, chart_grants
from tests.support.kafka import read_records
from tests.support.localstack import private_kafka

pytestmark = pytest.mark.faults
Json = dict[str, Any]

SERVICES = ("admission", "storage", "dispatcher", "receipts")
USERS = (*SERVICES, "rt-1", "rt-2", "acme", "globex", "intruder")
SECURITY = """\
sasl.enabled.mechanisms=PLAIN
sasl.mechanism.inter.broker.protocol=PLAIN
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:admin;User:ANONYMOUS
allow.everyone.if.no.acl.found=false
listener.name.sasl_plaintext.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required \
username="admin" password="admin-pw" user_admin="admin-pw" {users};
"""


@pytest.fixture(scope="module")
def acl_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    users = " ".join(f'user_{u}="{u}-pw"' for u in USERS)
    with private_kafka(tmp_path_factory.mktemp("acl-kafka"), "SASL_PLAINTEXT",
                       SECURITY.format(users=users)) as bootstrap:
        yield bootstrap


def as_user(base: Settings, user: str) -> Settings:
    return base.model_copy(update={"kafka_sasl_username": user,
                                   "kafka_sasl_password": f"{user}-pw"})


@pytest.fixture
async def core(settings: Settings, acl_bootstrap: str) -> Settings:
    """The base settings (the broker above, this test's prefix, its store), the topics made by
    the admin, and the chart's ACL table for this prefix added."""
    base = settings.model_copy(update={
        "kafka_bootstrap_servers": acl_bootstrap, "kafka_security_protocol": "SASL_PLAINTEXT",
        "kafka_sasl_mechanism": "PLAIN", "create_topics": False, "topic_partitions": 2,
        "input_tenants": "acme,globex", "binding_wait_timeout_s": 30.0})
    admin = as_user(base, "admin").model_copy(update={"create_topics": True})
    await ensure_topics(admin, topics_for(admin))
    grants = chart_grants(
        f"--set=config.SESSION_CORE_TOPIC_PREFIX={base.topic_prefix}",
        "--set=config.SESSION_CORE_INPUT_TENANTS=acme\\,globex",
        *[f"--set=kafkaAcls.principals.{s}=User:{s}" for s in SERVICES],
        "--set=kafkaAcls.runtimes={User:rt-1,User:rt-2}",
        "--set=kafkaAcls.tenants.acme={User:acme}", "--set=kafkaAcls.tenants.globex={User:globex}")
    await add_grants(admin, grants)
    return base


async def produce(s: Settings, topic: str, rec: Json, key: str) -> None:
    p = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap_servers, acks="all",
                         request_timeout_ms=15_000, **client_security(s))
    await p.start()
    try:
        await p.send_and_wait(topic, encode(rec), key=key.encode())
    finally:
        await p.stop()


async def refused(s: Settings, topic: str, rec: Json, key: str = "k") -> None:
    """Producing ``rec`` to ``topic`` as ``s``'s principal fails authorization."""
    with pytest.raises((TopicAuthorizationFailedError, KafkaError)) as got:
        async with asyncio.timeout(60):
            await produce(s, topic, rec, key)
    assert "uthoriz" in repr(got.value) or isinstance(got.value,
                                                       TopicAuthorizationFailedError), got.value


async def read_all(s: Settings, topic: str, want: int = 1, timeout: float = 30,
                   until: Any = None) -> list[Json]:
    return await read_records(s, topic, want, timeout, until, **client_security(s))


def create(text: str) -> Json:
    return {"op": "sessions.create", "request_id": f"req_{uuid.uuid4().hex}",
            "harness": "codex", "placement": "none", "input": text}


def registration(runtime_id: str) -> Json:
    return records.registration_record(
        runtime_id=runtime_id, harness="codex", bridge_protocol=3,
        placements=["none", "openai_hosted", "self_hosted"], message_images=True,
        function_result_images=True, status="ready", heartbeat_at=records_now())


def records_now() -> str:
    from shared.kafka import now_rfc3339

    return now_rfc3339()


async def test_the_broker_refuses_what_a_principal_may_not_write(core: Settings) -> None:
    """Forged input, admitted records, registrations and facts: the broker's ACLs refuse
    each before any Core service could read it."""
    t = topics_for(core)
    globex, rt, acme = as_user(core, "globex"), as_user(core, "rt-1"), as_user(core, "acme")
    # what each may do, it can: the refusals below are the table's, not a broker refusing all
    await produce(globex, t.tenant_input("globex"), create("mine"), "k")
    await produce(rt, t.runtime_registrations, registration("rt_" + "a" * 32), "rt_" + "a" * 32)
    await produce(rt, t.runtime_observations, records.observation_record(
        runtime_id="rt_" + "a" * 32, session_id="session_" + "0" * 32, harness="codex",
        native=None, turn_id=None, observation_id="o", observed_at=records_now()),
        "session_" + "0" * 32)
    # a tenant writes another tenant's input topic, or the shared one (naming anyone)
    await refused(globex, t.tenant_input("acme"), {**create("x"), "tenant": "acme"})
    await refused(globex, t.session_input, {**create("x"), "tenant": "acme"})
    # a tenant or a Runtime hand-makes an admitted record (past every admission check)
    admitted = {"schema": records.ADMITTED, "op": records.OP_CREATE, "request_id": "r",
                "session_id": "session_" + "0" * 32, "tenant": "acme"}
    await refused(acme, t.session_admitted, admitted)
    await refused(rt, t.session_admitted, admitted)
    # a principal that is not a Runtime registers
    await refused(globex, t.runtime_registrations, registration("rt_" + "f" * 32))
    await refused(as_user(core, "intruder"), t.runtime_registrations,
                  registration("rt_" + "f" * 32))
    # a Runtime writes Core's own facts (a binding, a Turn's end)
    await refused(rt, t.core_facts, records.fact_record(
        "session_" + "0" * 32, "dsp:bind:x", {"kind": "binding", "status": "bound",
                                              "runtime_id": "rt_x", "reason": None}))
    # … or reads another tenant's answers
    with pytest.raises(KafkaError):
        async with asyncio.timeout(60):
            c = AIOKafkaConsumer(t.tenant_input_results("acme"), group_id=None,
                                 bootstrap_servers=core.kafka_bootstrap_servers,
                                 **client_security(globex))
            await c.start()
            try:
                await c.getmany(timeout_ms=5000)
                await c.getone()
            finally:
                await c.stop()


async def test_core_runs_under_its_principals_and_refuses_a_runtime_it_did_not_bind(
        core: Settings) -> None:
    t = topics_for(core)
    services = [StorageService(as_user(core, "storage")),
                DispatcherService(as_user(core, "dispatcher")),
                ReceiptService(as_user(core, "receipts"))]
    admission = AdmissionService(as_user(core, "admission"))
    for svc in services:
        await svc.start()
    await admission.start(serve_http=False)
    rt1, rt2 = as_user(core, "rt-1"), as_user(core, "rt-2")
    bound_id, other_id = "rt_" + uuid.uuid4().hex, "rt_" + uuid.uuid4().hex
    admin = as_user(core, "admin")
    try:
        # the Runtimes register under their own principals; acme creates a Session on its topic
        await produce(rt1, t.runtime_registrations, registration(bound_id), bound_id)
        made = create("pay my bills")
        await produce(as_user(core, "acme"), t.tenant_input("acme"), made, made["request_id"])
        [answer] = await read_all(as_user(core, "acme"), t.tenant_input_results("acme"))
        assert answer["status"] == 201, answer
        sid = answer["body"]["id"]
        # rt-1 is bound (the only Runtime): its delivery arrives on runtime.deliveries
        deliveries = await read_all(rt1, t.runtime_deliveries, until=lambda d: d.get(
            "session_id") == sid, timeout=60)
        [d] = [x for x in deliveries if x.get("session_id") == sid]
        assert d["runtime_id"] == bound_id
        await produce(rt2, t.runtime_registrations, registration(other_id), other_id)

        def obs(rid: str, call_id: str, name: str) -> Json:
            return records.observation_record(
                runtime_id=rid, session_id=sid, harness="codex", turn_id=d["turn_id"],
                observation_id=uuid.uuid4().hex, observed_at=records_now(), native={
                    "method": "item/started", "params": {
                        "threadId": "thr", "turnId": "nt", "item": {
                            "type": "dynamicToolCall", "id": call_id, "tool": name,
                            "arguments": {}}}})

        # rt-2 may write observations (it is a Runtime) but is not this Session's: refused
        await produce(rt2, t.runtime_observations, obs(other_id, "call_evil", "transfer_funds"),
                      sid)
        # rt-1's own, after it on the same partition, is taken
        await produce(rt1, t.runtime_observations, obs(bound_id, "call_ok", "lookup"), sid)
        items = await read_all(admin, t.session_items, until=lambda i: i.get(
            "call_id") == "call_ok", timeout=60)
        mine = [(i["type"], i.get("call_id")) for i in items if i.get("session_id") == sid]
        assert ("function_call", "call_ok") in mine, mine
        assert ("function_call", "call_evil") not in mine, mine
        dead = await read_all(admin, t.dlq(t.runtime_observations))
        assert [(x["reason"], x["key"]) for x in dead] == [("not_bound_runtime", sid)], dead
        assert other_id in dead[0]["detail"] and bound_id in dead[0]["detail"]
        doc = await services[0].repo.db.items.count_documents(
            {"session_id": sid, "call_id": "call_evil"})
        assert doc == 0
    finally:
        await admission.stop()
        for svc in reversed(services):
            await svc.stop()

"""The chart's Kafka ACL table (``templates/kafka-acls.yaml``; docs/security.md, "The ACL
table"): every topic Core declares has its writers and readers and nothing else, a tenant's input
topics belong to that tenant's principals only, the mapping must cover exactly the input tenants,
and a service with its own SASL Secret authenticates with it. Applied to a real broker by
tests/faults/test_kafka_acls.py."""

from __future__ import annotations

import pytest

from shared.topics import Topics
from tests.support.acls import chart_grants
from tests.support.helm import helm_template, render

BASE = ("--set=config.SESSION_CORE_TOPIC_PREFIX=p.",
        "--set=config.SESSION_CORE_INPUT_TENANTS=acme",
        "--set=kafkaAcls.tenants.acme={User:acme}",
        "--set=kafkaAcls.runtimes={User:rt}")


def table() -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for g in chart_grants(*BASE):
        if g.resource == "Topic":
            out.setdefault((g.name, g.operation), set()).add(g.principal)
    return out


def test_every_declared_topic_has_its_writers_and_readers() -> None:
    t = table()
    topics = Topics(prefix="p.", tenants=("acme",))
    for name in topics.all():
        if name.endswith(".dlq"):
            continue
        # (no gateway, no operator listed: nobody writes the shared input or the controls)
        if name not in (topics.session_input, topics.session_input_results,
                        topics.runtime_control):
            assert (name, "Write") in t and (name, "Read") in t, name
    assert t[(topics.tenant_input("acme"), "Write")] == {"User:acme"}
    assert t[(topics.tenant_input_results("acme"), "Read")] == {"User:acme"}
    assert (topics.session_input, "Write") not in t  # nobody, unless a gateway is listed
    assert t[(topics.session_admitted, "Write")] == {"User:session-core-admission"}
    assert t[(topics.runtime_registrations, "Write")] == {"User:rt"}
    assert t[(topics.core_facts, "Write")] == {"User:session-core-dispatcher",
                                               "User:session-core-receipts"}
    assert t[(topics.runtime_deliveries, "Read")] == {"User:rt", "User:session-core-receipts"}
    # a grant names only topics Core declares
    assert {name for name, _op in t} <= set(topics.all())


@pytest.mark.parametrize(("args", "message"), [
    (("--set=config.SESSION_CORE_INPUT_TENANTS=acme",), "kafkaAcls.tenants.acme"),
    (("--set=kafkaAcls.tenants.globex={User:g}",), "not in config.SESSION_CORE_INPUT_TENANTS"),
    (("--set=kafkaAcls.job.enabled=true",), "kafkaAcls.job.adminSecret"),
])
def test_the_chart_refuses_a_table_that_does_not_fit(args: tuple[str, ...], message: str
                                                     ) -> None:
    out = helm_template("--set=image.repository=r/s", "--set=kafkaAcls.enabled=true", *args)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_a_service_with_its_own_secret_authenticates_with_it() -> None:
    docs = render("--set=services.storage.kafkaSasl.secretName=storage-kafka",
                  "--set=secretEnv.SESSION_CORE_KAFKA_SASL_USERNAME.name=shared-kafka",
                  "--set=secretEnv.SESSION_CORE_KAFKA_SASL_PASSWORD.name=shared-kafka")
    env = {d["metadata"]["labels"]["app.kubernetes.io/component"]: {
        e["name"]: e.get("valueFrom", {}).get("secretKeyRef", {}).get("name")
        for e in d["spec"]["template"]["spec"]["containers"][0].get("env", [])}
        for d in docs if d["kind"] == "Deployment"}
    assert env["storage"]["SESSION_CORE_KAFKA_SASL_USERNAME"] == "storage-kafka"
    assert env["storage"]["SESSION_CORE_KAFKA_SASL_PASSWORD"] == "storage-kafka"
    assert env["admission"]["SESSION_CORE_KAFKA_SASL_USERNAME"] == "shared-kafka"
    assert list(env["storage"]).count("SESSION_CORE_KAFKA_SASL_USERNAME") == 1

"""Topics as declared state (``shared.topics.plan_topics``): what is created, what is altered in
place, and what is refused with a message that says what to do. One function, no Kafka: the
integration test (tests/integration/test_topics_command.py) runs the command on the broker."""

from __future__ import annotations

import pytest

from shared.settings import Settings
from shared.topics import (
    Declared,
    Existing,
    Topics,
    declared_topics,
    min_insync_replicas,
    plan_topics,
)

S = Settings(topic_partitions=6, topic_replication_factor=3, topic_retention_ms=1000)
T = Topics(prefix="p.")
DECLARED = declared_topics(S, T, 2048)


def existing(**over: object) -> dict[str, Existing]:
    """The cluster exactly as declared, with ``over`` applied to p.session.input."""
    out = {d.name: Existing(d.name, d.partitions, d.replication_factor, dict(d.configs))
           for d in DECLARED}
    e = out["p.session.input"]
    out[e.name] = Existing(e.name, int(over.get("partitions", e.partitions)),  # type: ignore[call-overload]
                           int(over.get("rf", e.replication_factor)),  # type: ignore[call-overload]
                           {**e.configs, **over.get("configs", {})})  # type: ignore[dict-item]
    return out


@pytest.mark.parametrize(("rf", "isr"), [(1, 1), (2, 1), (3, 2), (5, 4)])
def test_min_insync_replicas_leaves_one_replica_to_lose(rf: int, isr: int) -> None:
    assert min_insync_replicas(rf) == isr


def test_declared_configs() -> None:
    by = {d.name: d for d in DECLARED}
    assert len(DECLARED) == len(T.all()) == 22
    assert by["p.session.input"].configs == {
        "max.message.bytes": "2048", "min.insync.replicas": "2", "cleanup.policy": "delete",
        "retention.ms": "1000"}
    assert by["p.runtime.registrations"].configs["cleanup.policy"] == "compact"
    assert "retention.ms" not in by["p.runtime.registrations"].configs
    assert {(d.partitions, d.replication_factor) for d in DECLARED} == {(6, 3)}


def test_nothing_to_do_when_the_cluster_is_as_declared() -> None:
    plan = plan_topics(DECLARED, existing())
    assert plan.ok and not plan.create and not plan.alter


def test_missing_topics_are_created() -> None:
    have = existing()
    del have["p.session.items"], have["p.core.facts.dlq"]
    plan = plan_topics(DECLARED, have)
    assert sorted(d.name for d in plan.create) == ["p.core.facts.dlq", "p.session.items"]
    assert plan.ok and not plan.alter


@pytest.mark.parametrize(
    ("configs", "altered"),
    [
        ({"retention.ms": "5"}, {"retention.ms": "1000"}),
        ({"min.insync.replicas": "1"}, {"min.insync.replicas": "2"}),
        ({"max.message.bytes": "1048588"}, {"max.message.bytes": "2048"}),
        ({"cleanup.policy": "compact"}, {"cleanup.policy": "delete"}),
        ({"retention.ms": "5", "min.insync.replicas": "3"},
         {"retention.ms": "1000", "min.insync.replicas": "2"}),
        ({"segment.ms": "60000"}, None),  # a config this project does not declare: left alone
    ],
)
def test_configs_that_differ_are_altered_in_place(configs: dict[str, str],
                                                   altered: dict[str, str] | None) -> None:
    plan = plan_topics(DECLARED, existing(configs=configs))
    assert plan.ok
    assert plan.alter == ({"p.session.input": altered} if altered else {})


@pytest.mark.parametrize(
    ("over", "words"),
    [
        ({"partitions": 3}, ["p.session.input has 3 partitions, declared 6",
                             "one writer per Session", "SESSION_CORE_TOPIC_PARTITIONS=3",
                             "do not share one partition count"]),
        ({"partitions": 12}, ["p.session.input has 12 partitions, declared 6",
                              "Kafka cannot remove partitions"]),
        ({"rf": 1}, ["p.session.input has replication factor 1, declared 3",
                     "partition reassignment"]),
    ],
)
def test_what_kafka_cannot_change_in_place_is_refused_with_a_clear_message(
        over: dict[str, int], words: list[str]) -> None:
    plan = plan_topics(DECLARED, existing(**over))
    assert not plan.ok
    text = "\n".join(plan.errors)
    for w in words:
        assert w in text, (w, text)


def test_co_partitioning_is_checked_even_when_a_topic_is_missing() -> None:
    have = existing(partitions=3)
    declared = [Declared(d.name, 3, d.replication_factor, d.configs) for d in DECLARED]
    have = {n: e if n != "p.session.items" else Existing(n, 4, 3, e.configs)
            for n, e in have.items()}
    have["p.session.input"] = Existing("p.session.input", 3, 3, have["p.session.input"].configs)
    plan = plan_topics(declared, have)
    assert any("do not share one partition count" in e for e in plan.errors)

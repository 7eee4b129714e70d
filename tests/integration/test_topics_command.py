"""``session-core topics`` on the real broker: topics as declared state. The command
runs as the chart's Job runs it (a process with environment settings), under a topic prefix of
this test's own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from shared.settings import Settings
from shared.topics import topics_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)
REPO = Path(__file__).resolve().parents[2]


def topics_cmd(settings: Settings, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "PYTHONPATH": str(REPO),
         "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
         "SESSION_CORE_TOPIC_PREFIX": settings.topic_prefix,
         "SESSION_CORE_TOPIC_REPLICATION_FACTOR": "1",
         "SESSION_CORE_LOG_FORMAT": "json", **env}
    return subprocess.run([sys.executable, "-m", "services.cli", "topics", *args], env=e,
                          capture_output=True, text=True, timeout=120, check=False)


async def describe(settings: Settings, name: str) -> tuple[int, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        (meta,) = await admin.describe_topics([name])
        (resp,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        (res,) = resp.to_object()["resources"]
        return len(meta["partitions"]), {e["config_names"]: e["config_value"]
                                         for e in res["config_entries"]}
    finally:
        await admin.close()


async def test_a_wrong_partition_count_fails_the_command_with_a_clear_message(
        settings: Settings) -> None:
    first = topics_cmd(settings, SESSION_CORE_TOPIC_PARTITIONS="2")
    assert first.returncode == 0, first.stderr
    name = topics_for(settings).session_input
    assert (await describe(settings, name))[0] == 2

    again = topics_cmd(settings, SESSION_CORE_TOPIC_PARTITIONS="3")
    assert again.returncode == 1, again.stderr
    assert f"topic {name} has 2 partitions, declared 3" in again.stderr
    assert "one writer per Session" in again.stderr
    assert "SESSION_CORE_TOPIC_PARTITIONS=2" in again.stderr
    assert (await describe(settings, name))[0] == 2, "partitions must not be changed"

    check = topics_cmd(settings, "check", SESSION_CORE_TOPIC_PARTITIONS="3")
    assert check.returncode == 1 and "has 2 partitions, declared 3" in check.stderr


async def test_retention_and_min_insync_replicas_are_altered_in_place(
        settings: Settings) -> None:
    assert topics_cmd(settings, SESSION_CORE_TOPIC_PARTITIONS="1",
                      SESSION_CORE_TOPIC_RETENTION_MS="3600000").returncode == 0
    name = topics_for(settings).session_items
    # a hand-set config the project does not declare is kept through the alteration
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers)
    await admin.start()
    try:
        _, cfg = await describe(settings, name)
        await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, name, {
            "retention.ms": "3600000", "max.message.bytes": cfg["max.message.bytes"],
            "min.insync.replicas": "2", "cleanup.policy": "delete",
            "segment.ms": "86400000"})])
    finally:
        await admin.close()

    check = topics_cmd(settings, "check", SESSION_CORE_TOPIC_PARTITIONS="1",
                       SESSION_CORE_TOPIC_RETENTION_MS="7200000")
    assert check.returncode == 1 and "configs differ" in check.stderr
    assert (await describe(settings, name))[1]["retention.ms"] == "3600000", "check changed it"

    done = topics_cmd(settings, SESSION_CORE_TOPIC_PARTITIONS="1",
                      SESSION_CORE_TOPIC_RETENTION_MS="7200000")
    assert done.returncode == 0, done.stderr
    _, cfg = await describe(settings, name)
    assert cfg["retention.ms"] == "7200000"
    assert cfg["min.insync.replicas"] == "1"
    assert cfg["segment.ms"] == "86400000"
    assert "topics.altered" in done.stderr
    ok = topics_cmd(settings, "check", SESSION_CORE_TOPIC_PARTITIONS="1",
                    SESSION_CORE_TOPIC_RETENTION_MS="7200000")
    assert ok.returncode == 0, ok.stderr

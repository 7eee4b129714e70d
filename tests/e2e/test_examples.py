"""The examples in ``examples/`` run against the running system: the HTTP producer
(an image message, a function call answered and confirmed), the Kafka producer (answers by
request id, a refusal with its param) and the de-duplicating Item-topic consumer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from session_core_client import Client
from tests.support.processes import TENANT, Core

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # make test-slow (README)

REPO = Path(__file__).resolve().parents[2]
API_KEY = "e2e-key"


def run_example(core: Core, name: str, *args: str, timeout: float = 120
                ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "SESSION_CORE_API": core.base_url,
           "SESSION_CORE_API_KEY": API_KEY,
           "KAFKA_BOOTSTRAP_SERVERS": core.settings.kafka_bootstrap_servers,
           "SESSION_CORE_TOPIC_PREFIX": core.settings.topic_prefix,
           "SESSION_CORE_TENANT": TENANT}
    out = subprocess.run([sys.executable, str(REPO / "examples" / name), *args], cwd=REPO,
                         env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert out.returncode == 0, f"{name} failed:\n{out.stdout}\n{out.stderr}"
    return out


def test_http_producer_example(core: Core) -> None:
    out = run_example(core, "producer_http.py")
    assert "image byte for byte" in out.stdout
    assert "the agent called get_weather" in out.stdout
    assert out.stdout.rstrip().endswith(": applied")


def test_kafka_producer_example(core: Core) -> None:
    out = run_example(core, "producer_kafka.py")
    assert "sessions.create → 201" in out.stdout
    assert "events.create → 202" in out.stdout
    assert "an empty input → 400 invalid_request (param input)" in out.stdout


def test_item_consumer_example_reads_every_item_once_in_order(core: Core) -> None:
    with Client(core.base_url, API_KEY) as client:
        s = client.create_session("codex", "for the consumer", wait=True, timeout_ms=60_000)
        client.send_message(s["id"], "second", wait=True, timeout_ms=60_000)
        stored = list(client.items(s["id"]))
    out = run_example(core, "consumer_items.py", s["id"], str(len(stored)))
    lines = out.stdout.strip().splitlines()
    assert [int(line.split()[0]) for line in lines] == [i["sequence"] for i in stored]
    assert [line.split()[1] for line in lines] == [i["type"] for i in stored]

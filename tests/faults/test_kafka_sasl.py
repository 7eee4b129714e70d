"""The Kafka SASL settings against a real broker: a private single-node Kafka (the local stack's
cached jars) whose only listener is SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256. Topic creation
(the admin client), the FastStream broker (``make_broker``) and a tail (``assigned_consumer``)
all authenticate with the settings; a wrong password is refused. Marked ``faults``: it starts its
own JVM. TLS is not exercised here (no keystores in the local stack): docs/security.md."""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.errors import KafkaError

from shared.kafka import assigned_consumer, decode, ensure_topics, make_broker, publish
from shared.settings import Settings
from shared.topics import topics_for

pytestmark = pytest.mark.faults

REPO = Path(__file__).resolve().parents[2]
USER, PASSWORD = "svc", f"svc-{uuid.uuid4().hex[:12]}"

PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{cport}
listeners=SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
inter.broker.listener.name=SASL_PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required \
username="admin" password="admin-secret" user_admin="admin-secret" user_{user}="{password}";
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required;
log.dirs={data}
num.network.threads=2
num.io.threads=2
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
"""


def _stack() -> Any:
    spec = importlib.util.spec_from_file_location("stack_for_sasl",
                                                  REPO / "deploy" / "local" / "stack.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["stack_for_sasl"] = mod
    spec.loader.exec_module(mod)
    return mod


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def sasl_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    stack = _stack()
    libs = stack.kafka_home() / "libs"
    if not any(libs.glob("kafka_2.13-*.jar")):
        pytest.skip("the Kafka jars are not installed (python3 deploy/local/stack.py install)")
    try:
        java = stack.java_bin()
    except stack.StackError as exc:
        pytest.skip(str(exc))
    root = tmp_path_factory.mktemp("sasl-kafka")
    port, cport = stack.free_port(), stack.free_port()
    props = root / "server.properties"
    props.write_text(PROPERTIES.format(port=port, cport=cport, data=root / "data", user=USER,
                                       password=PASSWORD))
    jvm = ["-Xms128m", "-Xmx384m", "-Djava.awt.headless=true", f"-Dkafka.logs.dir={root}",
           "-cp", f"{libs}/*"]
    cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    subprocess.run([java, *jvm, "kafka.tools.StorageTool", "format", "--standalone",
                    "-t", cluster, "-c", str(props),
                    "--add-scram", f"SCRAM-SHA-256=[name={USER},password={PASSWORD}]"],
                   check=True, capture_output=True, timeout=120)
    log = (root / "kafka.log").open("wb")
    proc = subprocess.Popen([java, *jvm, "kafka.Kafka", str(props)], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((root / "kafka.log").read_text()[-3000:])
            time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def _settings(bootstrap: str, mechanism: str, password: str = PASSWORD) -> Settings:
    return Settings(KAFKA_BOOTSTRAP_SERVERS=bootstrap,  # type: ignore[call-arg]
                    kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism=mechanism,
                    kafka_sasl_username=USER, kafka_sasl_password=password,
                    topic_prefix=f"s{uuid.uuid4().hex[:8]}.", topic_partitions=1)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_every_kind_of_client_authenticates_with_the_settings(
        sasl_bootstrap: str, mechanism: str) -> None:
    s = _settings(sasl_bootstrap, mechanism)
    topics = topics_for(s)
    async with asyncio.timeout(120):
        await ensure_topics(s, topics)  # the admin client
        broker = make_broker(s, "sasl-test")  # the FastStream broker
        await broker.start()
        try:
            marker = uuid.uuid4().hex
            await publish(broker, topics.session_items, {"marker": marker}, "k")
        finally:
            await broker.stop()
        tail = await assigned_consumer(s, topics.session_items, at_end=False)  # a tail
        try:
            seen: list[Any] = []
            while marker not in [v.get("marker") for v in seen]:
                got = await tail.getmany(timeout_ms=1000)
                seen.extend(decode(r.value) for recs in got.values() for r in recs)
        finally:
            await tail.stop()


async def test_a_wrong_password_is_refused(sasl_bootstrap: str) -> None:
    s = _settings(sasl_bootstrap, "SCRAM-SHA-256", password="wrong")
    with pytest.raises((KafkaError, TimeoutError)):
        async with asyncio.timeout(60):
            await ensure_topics(s, topics_for(s))

"""Brokers and stores of a test's own, from the local stack's cache (``deploy.local.stack``: the
Kafka jars, the FerretDB binary, Java, free ports), for the SASL/TLS tests in tests/faults and
the store-index test."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from deploy.local.stack import (
    StackError,
    free_port,
    free_ports,
    install_ferretdb,
    java_bin,
    kafka_home,
)
from deploy.local.stack.base import kafka_cluster_id, listening
from shared.kafka import assigned_consumer, decode, ensure_topics, make_broker, publish
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.skips import unavailable


@contextlib.contextmanager
def running(cmd: list[str], log_path: Path, port: int, timeout_s: float = 120
            ) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` until the block ends (SIGTERM, then SIGKILL); ready once ``port`` listens."""
    log = log_path.open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + timeout_s
        while not listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.3)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


SINGLE_NODE = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{cport}
listeners={listener}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners={listener}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
inter.broker.listener.name={listener}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,{listener}:{listener}
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


@contextlib.contextmanager
def private_kafka(root: Path, listener: str, security: str,
                  format_args: Sequence[str] = ()) -> Iterator[str]:
    """A single-node KRaft Kafka from the stack's cached jars whose only client listener is
    ``listener`` (``SSL``, ``SASL_PLAINTEXT`` …), configured by the ``security`` lines of
    ``server.properties``; yields its bootstrap address. Skips the test when the jars or Java
    are missing."""
    libs = kafka_home() / "libs"
    if not any(libs.glob("kafka_2.13-*.jar")):
        unavailable("the Kafka jars are not installed (python3 -m deploy.local.stack install)")
    try:
        java = java_bin()
    except StackError as exc:
        unavailable(str(exc))
    port, cport = free_ports(2)
    props = root / "server.properties"
    props.write_text(SINGLE_NODE.format(listener=listener, port=port, cport=cport,
                                        data=root / "data") + security)
    jvm = ["-Xms128m", "-Xmx384m", "-Djava.awt.headless=true", f"-Dkafka.logs.dir={root}",
           "-cp", f"{libs}/*"]
    cluster = kafka_cluster_id()
    subprocess.run([java, *jvm, "kafka.tools.StorageTool", "format", "--standalone",
                    "-t", cluster, "-c", str(props), *format_args],
                   check=True, capture_output=True, timeout=120)
    with running([java, *jvm, "kafka.Kafka", str(props)], root / "kafka.log", port):
        yield f"127.0.0.1:{port}"


async def every_kind_of_client(settings: Settings) -> None:
    """With ``settings``, the admin client creates the topics, the FastStream broker publishes
    a record and a tail (``assigned_consumer``) reads it back: every kind of Kafka client the
    services use. Raises (or times out) when one cannot connect."""
    topics = topics_for(settings)
    async with asyncio.timeout(120):
        await ensure_topics(settings, topics)  # the admin client
        broker = make_broker(settings, "security-test")  # the FastStream broker
        await broker.start()
        try:
            marker = uuid.uuid4().hex
            await publish(broker, topics.session_items, {"marker": marker}, "k")
        finally:
            await broker.stop()
        tail = await assigned_consumer(settings, topics.session_items, at_end=False)  # a tail
        try:
            seen: list[Any] = []
            while marker not in [v.get("marker") for v in seen]:
                got = await tail.getmany(timeout_ms=1000)
                seen.extend(decode(r.value) for recs in got.values() for r in recs)
        finally:
            await tail.stop()


class Store:
    """A FerretDB of a test's own (the binary the local stack builds) on a free port, its
    SQLite files under ``root/data``; ``extra``: more flags of the wrapper
    (deploy/local/ferretdb/main.go). ``run()`` starts it for a ``with`` block."""

    def __init__(self, binary: Path, root: Path) -> None:
        self.binary, self.root = binary, root
        self.data = root / "data"
        self.port = free_port()
        self.extra: list[str] = []

    def run(self) -> Any:
        cmd = [str(self.binary), "-listen", f"127.0.0.1:{self.port}",
               "-sqlite-dir", str(self.data), "-log-level", "warn", *self.extra]
        return running(cmd, self.root / f"ferretdb-{uuid.uuid4().hex[:6]}.log", self.port,
                       timeout_s=60)

    def client(self) -> MongoClient[dict[str, Any]]:
        return MongoClient(f"mongodb://127.0.0.1:{self.port}/", serverSelectionTimeoutMS=10_000)


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[Store]:
    try:
        binary = install_ferretdb()
    except StackError as exc:
        unavailable(str(exc))
    yield Store(binary, tmp_path)

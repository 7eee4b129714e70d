"""The Kafka SASL settings against a real broker: a private single-node Kafka (the local stack's
cached jars) whose only listener is SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256. Topic creation
(the admin client), the FastStream broker (``make_broker``) and a tail (``assigned_consumer``)
all authenticate with the settings; a wrong password is refused. Marked ``faults``: it starts its
own JVM. TLS: tests/faults/test_kafka_tls.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from aiokafka.errors import KafkaError

from shared.kafka import ensure_topics
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.localstack import every_kind_of_client, private_kafka

pytestmark = pytest.mark.faults

USER, PASSWORD = "svc", f"svc-{uuid.uuid4().hex[:12]}"

SECURITY = """\
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required \
username="admin" password="admin-secret" user_admin="admin-secret" user_{user}="{password}";
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required;
"""


@pytest.fixture(scope="module")
def sasl_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    security = SECURITY.format(user=USER, password=PASSWORD)
    with private_kafka(tmp_path_factory.mktemp("sasl-kafka"), "SASL_PLAINTEXT", security, [
            "--add-scram", f"SCRAM-SHA-256=[name={USER},password={PASSWORD}]"]) as bootstrap:
        yield bootstrap


def _settings(bootstrap: str, mechanism: str, password: str = PASSWORD) -> Settings:
    return Settings(KAFKA_BOOTSTRAP_SERVERS=bootstrap,  # type: ignore[call-arg]
                    kafka_security_protocol="SASL_PLAINTEXT", kafka_sasl_mechanism=mechanism,
                    kafka_sasl_username=USER, kafka_sasl_password=password,
                    topic_prefix=f"s{uuid.uuid4().hex[:8]}.", topic_partitions=1)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_every_kind_of_client_authenticates_with_the_settings(
        sasl_bootstrap: str, mechanism: str) -> None:
    s = _settings(sasl_bootstrap, mechanism)
    await every_kind_of_client(s)


async def test_a_wrong_password_is_refused(sasl_bootstrap: str) -> None:
    s = _settings(sasl_bootstrap, "SCRAM-SHA-256", password="wrong")
    with pytest.raises((KafkaError, TimeoutError)):
        async with asyncio.timeout(60):
            await ensure_topics(s, topics_for(s))

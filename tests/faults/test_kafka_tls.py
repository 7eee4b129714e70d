"""The Kafka TLS settings against a real broker: a private single-node Kafka whose only client
listener is SSL with client certificates required (mutual TLS), keys and CA as PEM files made by
a throw-away CA (tests/support/certs.py). The admin client, the FastStream broker and a tail all
connect with ``kafka_security_protocol=SSL`` + ``kafka_ssl_cafile`` / ``kafka_ssl_certfile`` /
``kafka_ssl_keyfile``; without a client certificate, or trusting another CA, the connection is
refused. Marked ``faults``: it starts its own JVM."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.errors import KafkaError

from shared.kafka import ensure_topics
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.certs import Certs, make_certs
from tests.support.localstack import every_kind_of_client, private_kafka

pytestmark = pytest.mark.faults

SECURITY = """\
ssl.keystore.type=PEM
ssl.keystore.location={keystore}
ssl.truststore.type=PEM
ssl.truststore.location={ca}
ssl.client.auth=required
"""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("kafka-certs"))


@pytest.fixture(scope="module")
def tls_bootstrap(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[str]:
    security = SECURITY.format(keystore=certs.server_pem, ca=certs.ca)
    with private_kafka(tmp_path_factory.mktemp("tls-kafka"), "SSL", security) as bootstrap:
        yield bootstrap


def _settings(bootstrap: str, ca: Path | None, cert: Path | None, key: Path | None) -> Settings:
    return Settings(KAFKA_BOOTSTRAP_SERVERS=bootstrap,  # type: ignore[call-arg]
                    kafka_security_protocol="SSL",
                    kafka_ssl_cafile=str(ca) if ca else None,
                    kafka_ssl_certfile=str(cert) if cert else None,
                    kafka_ssl_keyfile=str(key) if key else None,
                    topic_prefix=f"t{uuid.uuid4().hex[:8]}.", topic_partitions=1)


async def test_every_kind_of_client_connects_over_mutual_tls(tls_bootstrap: str,
                                                             certs: Certs) -> None:
    s = _settings(tls_bootstrap, certs.ca, certs.client_cert, certs.client_key)
    await every_kind_of_client(s)


@pytest.mark.parametrize("case", ["no client certificate", "another CA"])
async def test_a_client_the_broker_or_the_client_does_not_trust_is_refused(
        tls_bootstrap: str, certs: Certs, case: str) -> None:
    if case == "no client certificate":
        s = _settings(tls_bootstrap, certs.ca, None, None)
    else:
        s = _settings(tls_bootstrap, certs.other_ca, certs.client_cert, certs.client_key)
    with pytest.raises((KafkaError, TimeoutError, OSError)):
        async with asyncio.timeout(30):
            await ensure_topics(s, topics_for(s))

"""The Kafka and MongoDB security settings reach every client the project builds: the FastStream
broker (``make_broker``), the plain aiokafka clients (``client_security``: topic admin, tails, the
reference runtime) and the MongoDB client (``make_client``); and the local stack with auth on
tells how to call the API with a key it holds only hashed in the services' settings."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import certifi
import pytest
import trustme
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from deploy.local.stack.components import Options, service_env
from deploy.local.stack.lifecycle import print_banner
from deploy.local.stack.processes import State
from shared.domain.tenancy import ApiKeys
from shared.kafka import client_security, make_broker
from shared.settings import Settings
from shared.store import client_options, make_client

CA = certifi.where()
REPO = Path(__file__).resolve().parents[2]


def _sasl(**extra: Any) -> Settings:
    values: dict[str, Any] = {
        "kafka_security_protocol": "SASL_SSL", "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_username": "svc", "kafka_sasl_password": "s3cret", "kafka_ssl_cafile": CA}
    return Settings(**{**values, **extra})


def test_plaintext_adds_nothing() -> None:
    assert client_security(Settings()) == {}
    assert "security_protocol" not in make_broker(Settings(), "t")._connection_kwargs


@pytest.mark.parametrize(("proto", "mech", "want_mech"), [
    ("SASL_SSL", "SCRAM-SHA-512", "SCRAM-SHA-512"),
    ("SASL_SSL", "SCRAM-SHA-256", "SCRAM-SHA-256"),
    ("SASL_PLAINTEXT", "PLAIN", "PLAIN"),
    ("SASL_PLAINTEXT", None, "PLAIN"),
])
def test_sasl_reaches_the_broker_and_the_plain_clients(proto: str, mech: str | None,
                                                       want_mech: str) -> None:
    s = Settings(kafka_security_protocol=proto, kafka_sasl_mechanism=mech,
                 kafka_sasl_username="svc", kafka_sasl_password="s3cret", kafka_ssl_cafile=CA)
    for kw in (client_security(s), make_broker(s, "t")._connection_kwargs):
        assert kw["security_protocol"] == proto
        assert kw["sasl_mechanism"] == want_mech
        assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("svc", "s3cret")
        if proto == "SASL_SSL":
            assert isinstance(kw["ssl_context"], ssl.SSLContext)
        else:
            assert kw.get("ssl_context") is None


def test_tls_only_reaches_the_broker_and_the_plain_clients() -> None:
    s = Settings(kafka_security_protocol="SSL", kafka_ssl_cafile=CA)
    for kw in (client_security(s), make_broker(s, "t")._connection_kwargs):
        assert kw["security_protocol"] == "SSL"
        assert isinstance(kw["ssl_context"], ssl.SSLContext)
        assert kw["ssl_context"].verify_mode == ssl.CERT_REQUIRED
        assert "sasl_mechanism" not in kw or kw["sasl_mechanism"] in (None, "PLAIN")


def test_the_ca_file_is_the_trust_of_the_context() -> None:
    ctx = client_security(_sasl())["ssl_context"]
    assert ctx.cert_store_stats()["x509_ca"] > 0
    with pytest.raises(FileNotFoundError):
        client_security(_sasl(kafka_ssl_cafile="/nonexistent/ca.pem"))


def test_a_client_certificate_is_loaded_for_mutual_tls(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):  # the certificate settings are read
        client_security(_sasl(kafka_ssl_certfile="/nonexistent/client.pem"))
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    # a leaf needs at least one identity (a SAN): cryptography 51 refuses an empty list
    leaf = trustme.CA().issue_cert("session-core-test.local", common_name="session-core-test")
    leaf.cert_chain_pems[0].write_to_path(cert)
    leaf.private_key_pem.write_to_path(key)
    kw = client_security(_sasl(kafka_ssl_certfile=str(cert), kafka_ssl_keyfile=str(key)))
    assert isinstance(kw["ssl_context"], ssl.SSLContext)
    with pytest.raises(ssl.SSLError):  # a key that does not match the certificate
        client_security(_sasl(kafka_ssl_certfile=str(cert), kafka_ssl_keyfile=CA))


async def test_the_plain_aiokafka_clients_accept_the_keyword_arguments() -> None:
    kw = client_security(_sasl())
    for cls in (AIOKafkaConsumer, AIOKafkaProducer, AIOKafkaAdminClient):
        client: Any = cls(bootstrap_servers="127.0.0.1:1", **kw)  # not started: no connection
        inner = client.client if cls is AIOKafkaProducer else client._client
        assert inner._security_protocol == "SASL_SSL"
        assert inner._sasl_mechanism == "SCRAM-SHA-512"
        assert inner._ssl_context is kw["ssl_context"]
        if cls is not AIOKafkaAdminClient:
            await client.stop()


def test_every_plain_kafka_client_of_the_services_uses_the_security_settings() -> None:
    """No service builds an aiokafka client without ``client_security`` (the broker gets
    ``security``); a new one that forgets it fails here."""
    offenders = []
    for path in [p for top in ("services", "shared", "runtimes", "scripted_model", "demo")
                 for p in (REPO / top).rglob("*.py")]:
        text = path.read_text()
        for cls in ("AIOKafkaConsumer(", "AIOKafkaProducer(", "AIOKafkaAdminClient("):
            start = 0
            while (i := text.find(cls, start)) >= 0:
                call = text[i:text.find(")\n", i)]
                if "client_security(" not in call:
                    offenders.append(f"{path.relative_to(REPO)}: {cls}")
                start = i + 1
    assert offenders == []


def test_mongodb_tls_settings_reach_the_client() -> None:
    assert "tls" not in client_options(Settings())
    assert make_client(Settings()).options.pool_options._ssl_context is None
    s = Settings(mongodb_tls_ca_file=CA)
    assert client_options(s)["tls"] is True and client_options(s)["tlsCAFile"] == CA
    client = make_client(s)  # connects lazily
    assert isinstance(client.options.pool_options._ssl_context, ssl.SSLContext)
    opts = client_options(Settings(mongodb_tls_certificate_key_file="/etc/client.pem"))
    assert opts["tls"] is True and opts["tlsCertificateKeyFile"] == "/etc/client.pem"


# ---- the local stack -----------------------------------------------------------------------


def _opts(root: Path) -> Options:
    return Options(state=State(root), kafka_port=1, mongo_port=2, venv=root, with_services=True)


def test_stack_with_auth_on_gives_the_services_only_the_hash_and_prints_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SESSION_CORE_AUTH_DISABLED", "false")
    monkeypatch.delenv("SESSION_CORE_API_KEYS", raising=False)
    opts = _opts(tmp_path)
    env = service_env(opts)
    key = (tmp_path / "api-key").read_text().strip()
    assert env["SESSION_CORE_AUTH_DISABLED"] == "false"
    assert key not in env["SESSION_CORE_API_KEYS"]
    assert ApiKeys.parse(env["SESSION_CORE_API_KEYS"]).tenant_of(key) == "default"
    assert service_env(opts)["SESSION_CORE_API_KEYS"] == env["SESSION_CORE_API_KEYS"]
    print_banner(opts)
    out = capsys.readouterr().out
    assert f"Authorization: Bearer {key}" in out and "auth            : ON" in out


def test_stack_with_your_keys_or_auth_off_makes_no_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    opts = _opts(tmp_path)
    monkeypatch.setenv("SESSION_CORE_AUTH_DISABLED", "false")
    monkeypatch.setenv("SESSION_CORE_API_KEYS", "acme:" + "0" * 64)
    assert "SESSION_CORE_API_KEYS" not in service_env(opts)  # yours pass through
    print_banner(opts)
    assert "session-core hash-key" in capsys.readouterr().out
    monkeypatch.delenv("SESSION_CORE_AUTH_DISABLED")
    assert service_env(opts)["SESSION_CORE_AUTH_DISABLED"] == "true"
    print_banner(opts)
    assert "auth            : OFF" in capsys.readouterr().out
    assert not (tmp_path / "api-key").exists()

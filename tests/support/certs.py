"""A throw-away certificate authority for the TLS tests (tests/faults): a CA, a server
certificate for 127.0.0.1/localhost and a client certificate, made with ``trustme``. Each leaf
certificate serves both ends (Kafka's broker also connects to itself over TLS). Keys are
unencrypted PKCS#8 PEM, the only form Kafka's PEM keystore reads."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)


@dataclass(frozen=True)
class Certs:
    ca: Path  # the CA certificate (PEM)
    server_cert: Path
    server_key: Path
    server_pem: Path  # key + certificate in one file (a Kafka PEM keystore)
    client_cert: Path
    client_key: Path
    client_pem: Path  # certificate + key in one file (PyMongo's tlsCertificateKeyFile)
    other_ca: Path  # a CA that signed nothing here: trusting it must fail


def _leaf(d: Path, name: str, ca: trustme.CA) -> tuple[Path, Path]:
    leaf = ca.issue_cert("127.0.0.1", "localhost", common_name=name)
    key = load_pem_private_key(leaf.private_key_pem.bytes(), None)
    (d / f"{name}.key").write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8,
                                                      NoEncryption()))
    leaf.cert_chain_pems[0].write_to_path(d / f"{name}.crt")
    return d / f"{name}.key", d / f"{name}.crt"


def make_certs(d: Path) -> Certs:
    d.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(d / "test-ca.pem")
    other.cert_pem.write_to_path(d / "other-ca.pem")
    server_key, server_cert = _leaf(d, "server", ca)
    client_key, client_cert = _leaf(d, "client", ca)
    server_pem = d / "server-keystore.pem"
    server_pem.write_text(server_key.read_text() + server_cert.read_text())
    client_pem = d / "client-bundle.pem"
    client_pem.write_text(client_cert.read_text() + client_key.read_text())
    return Certs(ca=d / "test-ca.pem", server_cert=server_cert, server_key=server_key,
                 server_pem=server_pem, client_cert=client_cert, client_key=client_key,
                 client_pem=client_pem, other_ca=d / "other-ca.pem")

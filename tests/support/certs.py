"""A throw-away certificate authority for the TLS tests (tests/faults): a CA, a server
certificate for 127.0.0.1/localhost and a client certificate, made with the ``openssl`` command
line (no Python crypto package is needed). Keys are unencrypted PKCS#8 PEM."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


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


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _ca(d: Path, name: str) -> tuple[Path, Path]:
    key, cert = d / f"{name}.key", d / f"{name}.pem"
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(key), cwd=d)
    _openssl("req", "-x509", "-new", "-key", str(key), "-sha256", "-days", "2",
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-out", str(cert), cwd=d)
    return key, cert


def _leaf(d: Path, name: str, ca_key: Path, ca_cert: Path) -> tuple[Path, Path]:
    key, csr, cert, ext = (d / f"{name}.key", d / f"{name}.csr", d / f"{name}.crt",
                           d / f"{name}.ext")
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(key), cwd=d)
    _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={name}", "-out", str(csr), cwd=d)
    # One certificate may serve both ends (Kafka's broker also connects to itself over TLS).
    ext.write_text("basicConstraints=CA:FALSE\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth,clientAuth\n"
                   "subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "2", "-sha256", "-extfile", str(ext),
             "-out", str(cert), cwd=d)
    return key, cert


def make_certs(d: Path) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d.mkdir(parents=True, exist_ok=True)
    ca_key, ca = _ca(d, "test-ca")
    _, other_ca = _ca(d, "other-ca")
    server_key, server_cert = _leaf(d, "server", ca_key, ca)
    client_key, client_cert = _leaf(d, "client", ca_key, ca)
    server_pem = d / "server-keystore.pem"
    server_pem.write_text(server_key.read_text() + server_cert.read_text())
    client_pem = d / "client-bundle.pem"
    client_pem.write_text(client_cert.read_text() + client_key.read_text())
    return Certs(ca=ca, server_cert=server_cert, server_key=server_key, server_pem=server_pem,
                 client_cert=client_cert, client_key=client_key, client_pem=client_pem,
                 other_ca=other_ca)

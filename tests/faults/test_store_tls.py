"""The MongoDB TLS settings against a real MongoDB-wire server: the local stack's FerretDB with
only a TLS listener and client certificates required (``-tls-ca-file``; mutual TLS), certificates
from a throw-away CA (tests/support/certs.py). A client made by ``shared.store.make_client`` with
``mongodb_tls_ca_file`` + ``mongodb_tls_certificate_key_file`` creates the indexes and writes and
reads a document; without a client certificate, trusting another CA, or without TLS at all, it
cannot. Marked ``faults``: it starts its own FerretDB."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pymongo.errors import PyMongoError

from deploy.local.stack import StackError, free_port, install_ferretdb
from shared.settings import Settings
from shared.store import database, ensure_indexes, make_client, ping
from tests.support.certs import Certs, make_certs
from tests.support.localstack import running
from tests.support.skips import unavailable

pytestmark = pytest.mark.faults


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("store-certs"))


@pytest.fixture(scope="module")
def tls_uri(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[str]:
    try:
        binary = install_ferretdb()  # cached: built by `make install`
    except StackError as exc:
        unavailable(str(exc))
    root = tmp_path_factory.mktemp("tls-ferretdb")
    port = free_port()
    cmd = [str(binary), "-listen", "", "-listen-tls", f"127.0.0.1:{port}",
           "-tls-cert-file", str(certs.server_cert), "-tls-key-file", str(certs.server_key),
           "-tls-ca-file", str(certs.ca), "-sqlite-dir", str(root / "data"),
           "-log-level", "warn"]
    with running(cmd, root / "ferretdb.log", port, timeout_s=60):
        yield f"mongodb://127.0.0.1:{port}/"


def _settings(uri: str, ca: Path | None, client: Path | None) -> Settings:
    return Settings(MONGODB_URI=uri,  # type: ignore[call-arg]
                    mongodb_database=f"tls_{uuid.uuid4().hex[:8]}",
                    mongodb_tls_ca_file=str(ca) if ca else None,
                    mongodb_tls_certificate_key_file=str(client) if client else None)


async def test_the_store_client_connects_over_mutual_tls(tls_uri: str, certs: Certs) -> None:
    s = _settings(tls_uri, certs.ca, certs.client_pem)
    client = make_client(s)
    try:
        assert await ping(client)
        db = database(client, s)
        await ensure_indexes(db)
        await db.probe.insert_one({"_id": "tls", "v": 1})
        assert await db.probe.find_one({"_id": "tls"}) == {"_id": "tls", "v": 1}
    finally:
        await client.close()


@pytest.mark.parametrize("case", ["no client certificate", "another CA", "no TLS"])
async def test_a_client_without_the_right_tls_settings_cannot_connect(
        tls_uri: str, certs: Certs, case: str) -> None:
    s = {"no client certificate": _settings(tls_uri, certs.ca, None),
         "another CA": _settings(tls_uri, certs.other_ca, certs.client_pem),
         "no TLS": _settings(tls_uri, None, None)}[case]
    client = make_client(s, server_selection_ms=3_000)
    try:
        with pytest.raises(PyMongoError):
            await client[s.mongodb_database].probe.insert_one({"_id": "x"})
    finally:
        await client.close()

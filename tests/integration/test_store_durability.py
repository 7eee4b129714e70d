"""The local store is durable by default: every SQLite connection of the running FerretDB runs
with ``synchronous=FULL`` in WAL mode (a commit's WAL is fsynced before FerretDB answers, so an
acknowledged write survives an OS crash or power loss, and the file cannot be corrupted by one),
and ``off`` / ``normal`` are opt-ins (``-sqlite-synchronous``; ``SESSION_CORE_SQLITE_SYNCHRONOUS``
for the launcher). docs/local-stack.md, "The FerretDB wrapper", its item on the durability of
the local store.

The level is read back from the running store, not from its command line: the wrapper
(deploy/local/ferretdb/durability.go) asks every connection it or FerretDB opens for
``PRAGMA synchronous`` and ``PRAGMA journal_mode`` after its pragmas, and counts the answers
in ``sqlite_connections`` on ``/debug/vars`` (``-pprof-listen``)."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from deploy.local.stack import Stack
from deploy.local.stack.base import free_port
from tests.support.localstack import Store

pytestmark = pytest.mark.integration


def connections(port: int) -> dict[str, int]:
    """``sqlite_connections``: the store's connections by ``<synchronous>/<journal_mode>``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/vars", timeout=10) as r:
        out: dict[str, Any] = json.loads(r.read())
    return {k: int(v) for k, v in out["sqlite_connections"].items()}


def write_and_read_levels(mongodb_uri: str, pprof_port: int) -> dict[str, int]:
    """Writes to two databases (two files, each with connections of FerretDB's and of the
    wrapper's _id indexer), then the levels every connection so far reported."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongodb_uri,
                                                     serverSelectionTimeoutMS=20_000)
    try:
        for _ in range(2):
            db = client[f"durable_{uuid.uuid4().hex[:8]}"]
            db["items"].insert_many([{"_id": i, "text": "x" * 100} for i in range(20)])
            assert db["items"].count_documents({}) == 20
    finally:
        client.close()
    time.sleep(1.0)  # the _id indexer's sweep (every 200 ms) opens its connections too
    return connections(pprof_port)


# the wrapper's flags → what every one of its connections must report
WRAPPER = [
    ([], "full/wal"),  # the default
    (["-sqlite-synchronous", "full"], "full/wal"),
    (["-sqlite-synchronous", "normal"], "normal/wal"),
    (["-sqlite-synchronous", "off"], "off/wal"),
]


@pytest.mark.parametrize(("flags", "level"), WRAPPER)
def test_every_connection_of_the_store_runs_at_the_chosen_level(
        store: Store, flags: list[str], level: str) -> None:
    port = free_port()
    store.extra = ["-pprof-listen", f"127.0.0.1:{port}", *flags]
    with store.run():
        got = write_and_read_levels(f"mongodb://127.0.0.1:{store.port}/", port)
    assert set(got) == {level}, got
    assert got[level] >= 2, got  # at least one connection per database file


# SESSION_CORE_SQLITE_SYNCHRONOUS (None: unset) → what the launcher's store reports
LAUNCHER = [(None, "full/wal"), ("off", "off/wal")]


@pytest.mark.parametrize(("env", "level"), LAUNCHER)
def test_the_launchers_store_is_durable_unless_told_otherwise(
        monkeypatch: pytest.MonkeyPatch, env: str | None, level: str) -> None:
    """What ``make run`` / ``make up`` start (deploy/local/stack/components.py), read back from
    the running FerretDB."""
    port = free_port()
    monkeypatch.setenv("SESSION_CORE_FERRETDB_PPROF", f"127.0.0.1:{port}")
    monkeypatch.setenv("SESSION_CORE_STORE_BACKEND", "sqlite")
    if env is None:
        monkeypatch.delenv("SESSION_CORE_SQLITE_SYNCHRONOUS", raising=False)
    else:
        monkeypatch.setenv("SESSION_CORE_SQLITE_SYNCHRONOUS", env)
    state = Path(tempfile.mkdtemp(prefix="session-core-durable-"))
    # Kafka is not needed: a placeholder address keeps the stack from starting one
    st = Stack.on_free_ports(state, echo=False, external_kafka="127.0.0.1:9",
                             external_mongo=None, store_backend="sqlite")
    try:
        st.up()
        got = write_and_read_levels(st.mongodb_uri, port)
    finally:
        st.down()
        shutil.rmtree(state, ignore_errors=True)
    assert set(got) == {level}, got
    assert got[level] >= 2, got

"""FerretDB on PostgreSQL answers an ``_id`` lookup with an index scan.

FerretDB v1.24's PostgreSQL backend filters a string ``_id`` equality with
``WHERE _jsonb->$1 @> $2`` ($1 = '_id'), but the ``_id_`` index it creates is a btree on
``(_jsonb->'_id')``, which cannot serve ``@>``: every lookup scanned the collection's table. The
embedded wrapper (deploy/local/ferretdb/pgindex.go) adds a GIN index on that expression to every
collection's table, and runs FerretDB's connections with plan_cache_mode=force_custom_plan so the
planner sees $1 as '_id' (main.go).

The test starts a private PostgreSQL and FerretDB through the local stack
(``store_backend="postgresql"``), fills a collection with 10^5 documents and reads the plan
PostgreSQL itself executed for FerretDB's statement (auto_explain, in the server log).

Without PostgreSQL's server programs it is skipped, saying so — unless
SESSION_CORE_STORE_BACKEND=postgresql asks for that backend, where a missing PostgreSQL fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from deploy.local.stack import Stack
from deploy.local.stack import postgres as pg
from tests.support.skips import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)

N_DOCS = 100_000


@pytest.fixture(scope="module")
def pg_stack() -> Iterator[Stack]:
    if not pg.available():
        reason = ("PostgreSQL server programs (initdb, postgres) not found: install Debian's "
                  "postgresql package or set SESSION_CORE_PG_BIN")
        if os.environ.get("SESSION_CORE_STORE_BACKEND", "").lower().startswith("postgres"):
            pytest.fail(reason + " (SESSION_CORE_STORE_BACKEND asks for postgresql)")
        unavailable(reason)  # fails under CI, which installs Debian's postgresql
    state = Path(tempfile.mkdtemp(prefix="session-core-pgstore-"))
    # Kafka is not needed: a placeholder address keeps the stack from starting one
    st = Stack.on_free_ports(state, echo=False, external_kafka="127.0.0.1:9",
                             external_mongo=None, store_backend="postgresql")
    try:
        st.up()
        yield st
    finally:
        st.down()
        shutil.rmtree(state, ignore_errors=True)


def psql(st: Stack, sql: str) -> str:
    port = st.options().state.load().data["postgres_port"]
    out = subprocess.run([str(pg.pg_bin("psql")), "-X", "-q", "-At", "-h", "127.0.0.1",
                          "-p", str(port), "-U", pg.ROLE, "-d", pg.DATABASE, "-c", sql],
                         capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.strip()


def client(st: Stack) -> MongoClient[dict[str, Any]]:
    return MongoClient(st.mongodb_uri, serverSelectionTimeoutMS=20_000)


def wait_for(what: str, check: Any, timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_id_lookup_is_an_index_scan_at_1e5_documents(pg_stack: Stack) -> None:
    dbname = f"idxcheck_{uuid.uuid4().hex[:8]}"  # not "pg…": FerretDB ignores such schemas
    with client(pg_stack) as c:
        coll = c[dbname]["things"]
        for i in range(0, N_DOCS, 2000):
            coll.insert_many([{"_id": f"k{j}", "v": j, "pad": "x" * 100}
                              for j in range(i, i + 2000)], ordered=False)
    table = psql(pg_stack, f"SELECT tablename FROM pg_tables WHERE schemaname = '{dbname}' "
                           "AND tablename <> '_ferretdb_database_metadata'")
    assert table.startswith("things_"), table
    indexdef = wait_for("the wrapper's GIN index", lambda: psql(
        pg_stack, f"SELECT indexdef FROM pg_indexes WHERE schemaname = '{dbname}' "
                  f"AND tablename = '{table}' AND indexname LIKE 'sc\\_id\\_gin\\_%'"))
    assert "USING gin" in indexdef and "(_jsonb -> '_id'::text)" in indexdef, indexdef
    assert "fastupdate=off" in indexdef, indexdef
    psql(pg_stack, "ANALYZE")

    # FerretDB's new connections log the plan of every statement they run
    psql(pg_stack, f"ALTER DATABASE {pg.DATABASE} SET session_preload_libraries = 'auto_explain'")
    psql(pg_stack, f"ALTER DATABASE {pg.DATABASE} SET auto_explain.log_min_duration = 0")
    psql(pg_stack, f"ALTER DATABASE {pg.DATABASE} SET auto_explain.log_level = 'warning'")
    pg_stack.stop("ferretdb")
    pg_stack.start("ferretdb")
    log = pg_stack.options().state.logs / "postgres.log"
    mark = log.stat().st_size
    keys = [f"k{j}" for j in (7, 54_321, 99_999)]
    with client(pg_stack) as c:
        coll = c[dbname]["things"]
        for _ in range(8):  # past the 5 executions after which a generic plan could be chosen
            for k in keys:
                got = coll.find_one({"_id": k})
                assert got is not None and got["v"] == int(k[1:])
    text = wait_for("auto_explain's plans", lambda: (
        t if (t := log.read_text(errors="replace")[mark:]).count('@> \'"k99999"\'') >= 8
        else ""))
    plans = [p for p in re.split(r"\n(?=\S)", text) if "Query Text: SELECT" in p
             and table in p and "@>" in p]
    assert len(plans) >= 3 * 8, text[-3000:]
    for plan in plans:
        assert "Seq Scan" not in plan, plan
        assert re.search(r"(Bitmap )?Index Scan on sc_id_gin_", plan), plan


def test_the_postgresql_store_is_durable_by_default(pg_stack: Stack) -> None:
    """``synchronous_commit`` as the running server reports it: ``on`` (a commit's WAL flushed
    before PostgreSQL answers) unless ``SESSION_CORE_PG_SYNCHRONOUS_COMMIT`` asked for another."""
    assert psql(pg_stack, "SHOW synchronous_commit") == (os.environ.get(pg.SYNC_ENV) or "on")

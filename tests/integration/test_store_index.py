"""The local store answers an ``_id`` lookup with an index lookup, not a scan.

FerretDB v1 (SQLite backend) filters a single string/ObjectId ``_id`` equality with
``WHERE _ferretdb_sjson->'$._id' = ?`` (and updates/deletes by the same expression), but the
``_id_`` index it creates is on ``_ferretdb_sjson->"_id"``; SQLite only uses an expression index
for the identical expression, so every lookup scanned the collection. The embedded wrapper
(deploy/local/ferretdb/idindex.go) adds the index on the exact expression to every collection.

These tests start their own FerretDB (the binary the local stack builds) on a free port and read
the store's own query plan: FerretDB's ``explain`` runs SQLite's ``EXPLAIN QUERY PLAN`` on the SQL
it would issue; for the UPDATE/DELETE statements (which ``explain`` does not cover) the plan is
read from the same SQLite file with the statement text FerretDB v1.24 issues."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pymongo.errors import DuplicateKeyError

from tests.support.localstack import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)


def find_plan(db: Any, coll: str, key: str) -> list[str]:
    out = db.command("explain", {"find": coll, "filter": {"_id": key}})
    assert out.get("filterPushdown") is True, out  # FerretDB pushes the _id equality to SQL
    return [str(line) for line in out["queryPlanner"]["Plan"]]


def indexed(plan: list[str]) -> bool:
    return any("USING INDEX" in line for line in plan) and not any(
        "detail=SCAN" in line for line in plan)


def wait_indexed(db: Any, coll: str, key: str, timeout_s: float = 10.0) -> list[str]:
    """The wrapper indexes new collections within its sweep interval; wait for at most 10 s.
    A real lookup goes first: SQLite re-reads a changed schema when a connection runs a
    statement, but an EXPLAIN alone is planned with the schema the connection last saw."""
    deadline = time.monotonic() + timeout_s
    while True:
        db[coll].find_one({"_id": key})
        plan = find_plan(db, coll, key)
        if indexed(plan) or time.monotonic() > deadline:
            return plan
        time.sleep(0.1)


def table_of(data: Path, dbname: str, coll: str) -> str:
    with sqlite3.connect(f"file:{data / (dbname + '.sqlite')}?mode=ro", uri=True) as con:
        row = con.execute("SELECT table_name FROM _ferretdb_collections WHERE name = ?",
                          (coll,)).fetchone()
    assert row is not None
    return str(row[0])


def sql_plan(data: Path, dbname: str, sql: str, *args: Any) -> list[str]:
    with sqlite3.connect(f"file:{data / (dbname + '.sqlite')}?mode=ro", uri=True) as con:
        return [str(r[3]) for r in con.execute("EXPLAIN QUERY PLAN " + sql, args)]


def test_id_lookups_use_an_index_in_every_collection(store: Store) -> None:
    dbname, other = f"idx_{uuid.uuid4().hex[:8]}", f"idx_{uuid.uuid4().hex[:8]}"
    with store.run():
        client = store.client()
        try:
            db = client[dbname]
            db["items"].insert_many([{"_id": f"k{i:05d}", "n": i} for i in range(2000)])
            plan = wait_indexed(db, "items", "k01234")
            assert indexed(plan), plan
            assert db["items"].find_one({"_id": "k01234"}) == {"_id": "k01234", "n": 1234}
            # a collection created later, in another database, gets the index too
            client[other].create_collection("sessions")
            client[other]["sessions"].insert_one({"_id": "s1"})
            assert indexed(wait_indexed(client[other], "sessions", "s1"))
            # ObjectId _ids are pushed down with the same expression
            db["oids"].insert_one({"x": 1})
            oid = db["oids"].find_one()["_id"]  # type: ignore[index]
            deadline = time.monotonic() + 10
            while True:
                db["oids"].find_one({"_id": oid})
                out = db.command("explain", {"find": "oids", "filter": {"_id": oid}})
                if indexed([str(x) for x in out["queryPlanner"]["Plan"]]):
                    break
                assert time.monotonic() < deadline, out
                time.sleep(0.1)
        finally:
            client.close()
    # FerretDB's UPDATE and DELETE by _id use the same expression (v1.24 collection.go)
    table = table_of(store.data, dbname, "items")
    upd = sql_plan(store.data, dbname,
                   f"UPDATE \"{table}\" SET _ferretdb_sjson = ? WHERE _ferretdb_sjson->'$._id' = ?",
                   "{}", '"k1"')
    assert any("USING INDEX" in d for d in upd), upd
    dele = sql_plan(store.data, dbname,
                    f"DELETE FROM \"{table}\" WHERE _ferretdb_sjson->'$._id' IN (?, ?)",
                    '"k1"', '"k2"')
    assert any("USING INDEX" in d for d in dele), dele


def test_the_index_survives_a_restart_and_is_made_once(store: Store) -> None:
    dbname = f"idx_{uuid.uuid4().hex[:8]}"
    for _ in range(2):  # the second start finds the index made and makes no other
        with store.run():
            client = store.client()
            try:
                db = client[dbname]
                db["c"].update_one({"_id": "a"}, {"$inc": {"n": 1}}, upsert=True)
                assert indexed(wait_indexed(db, "c", "a"))
            finally:
                client.close()
    table = table_of(store.data, dbname, "c")
    with sqlite3.connect(f"file:{store.data / (dbname + '.sqlite')}?mode=ro", uri=True) as con:
        sqls = [r[0] for r in con.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,))]
    # one _id index, FerretDB's own name, unique, on the expression the statements use
    assert len([s for s in sqls if "_id" in s.split(" ON ")[1]]) == 1, sqls
    assert f'CREATE UNIQUE INDEX "{table}__id_" ON "{table}" (_ferretdb_sjson->\'$._id\')' \
        in sqls, sqls
    with store.run():
        client = store.client()
        try:
            assert client[dbname]["c"].find_one({"_id": "a"}) == {"_id": "a", "n": 2}
            # FerretDB still lists only its own indexes (ours is not in its metadata)
            names = [ix["name"] for ix in client[dbname]["c"].list_indexes()]
            assert names == ["_id_"], names
            # the rebuilt index still enforces _id uniqueness
            with pytest.raises(DuplicateKeyError):
                client[dbname]["c"].insert_one({"_id": "a"})
        finally:
            client.close()


def _ids_indexes(data: Path, dbname: str, table: str) -> list[str]:
    with sqlite3.connect(f"file:{data / (dbname + '.sqlite')}?mode=ro", uri=True) as con:
        return sorted(r[0] for r in con.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,)))


def test_a_data_directory_of_an_older_wrapper_is_brought_to_one_id_index(store: Store) -> None:
    """Earlier wrappers kept FerretDB's ``->"_id"`` index and added ``<table>_sc_id_path``: two
    random-key b-trees per write. A start over such a directory leaves one."""
    dbname = f"idx_{uuid.uuid4().hex[:8]}"
    with store.run():
        client = store.client()
        try:
            db = client[dbname]
            db["c"].insert_many([{"_id": f"k{i}"} for i in range(100)])
            assert indexed(wait_indexed(db, "c", "k1"))
        finally:
            client.close()
    table = table_of(store.data, dbname, "c")
    with sqlite3.connect(str(store.data / (dbname + ".sqlite"))) as con:  # the old layout
        con.execute(f'DROP INDEX "{table}__id_"')
        con.execute(f'CREATE UNIQUE INDEX "{table}__id_" ON "{table}" (_ferretdb_sjson->"_id")')
        con.execute(f'CREATE INDEX "{table}_sc_id_path" ON "{table}" '
                    "(_ferretdb_sjson->'$._id')")
    assert len(_ids_indexes(store.data, dbname, table)) == 2
    with store.run():
        client = store.client()
        try:
            db = client[dbname]
            assert indexed(wait_indexed(db, "c", "k2"))
            deadline = time.monotonic() + 10
            while len(_ids_indexes(store.data, dbname, table)) != 1:
                assert time.monotonic() < deadline, _ids_indexes(store.data, dbname, table)
                time.sleep(0.1)
            assert db["c"].count_documents({}) == 100
            with pytest.raises(DuplicateKeyError):
                db["c"].insert_one({"_id": "k7"})
        finally:
            client.close()

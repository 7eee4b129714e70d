"""The local store's writers wait for SQLite's write lock by polling finely (deploy/local/ferretdb/
busy.go), not with SQLite's default busy handler, which sleeps 1, 2, 5 … 100 ms between attempts
and so keeps a waiting commit asleep long after the lock came free.

The test holds the write lock of a database file from a connection of its own (``BEGIN
IMMEDIATE``) while an insert comes through FerretDB, releases it, and reads the wrapper's counters
(``/debug/vars`` of ``-pprof-listen``): how many waits began and how many attempts followed a
pause. 300 ms of waiting is 13 attempts on SQLite's schedule and, on the wrapper's (0.1 ms steps
for the first 2 ms, 0.4 ms until 20 ms, then 1 ms), over 300 by the schedule — the count tells
which handler ran without timing anything. With ``-sqlite-busy-poll 0`` the wrapper leaves
SQLite's handler in place (its counters stay at zero) and the insert still succeeds."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.request
import uuid
from typing import Any

import pytest

from deploy.local.stack.base import free_port
from tests.support.localstack import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)

HOLD_S = 0.3


def counters(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/vars", timeout=10) as r:
        out: dict[str, Any] = json.loads(r.read())
    return {k: int(v) for k, v in out.items() if k.startswith("sqlite_busy_")}


def insert_behind_a_held_lock(store: Store, dbname: str) -> None:
    client = store.client()
    try:
        db = client[dbname]
        db["items"].insert_one({"_id": "first"})  # the database file exists
        con = sqlite3.connect(str(store.data / f"{dbname}.sqlite"), isolation_level=None,
                              timeout=10)
        try:
            con.execute("BEGIN IMMEDIATE")  # SQLite's one write lock, held by this test
            done: list[BaseException | None] = []

            def insert() -> None:
                try:
                    db["items"].insert_one({"_id": "behind"})
                    done.append(None)
                except BaseException as exc:  # reported by the assertion below
                    done.append(exc)

            writer = threading.Thread(target=insert)
            writer.start()
            time.sleep(HOLD_S)
            assert done == [], "the insert did not wait for the held lock"
            con.execute("COMMIT")
        finally:
            con.close()
        writer.join(30)
        assert done == [None], done
        assert db["items"].find_one({"_id": "behind"}) == {"_id": "behind"}
    finally:
        client.close()


def test_a_writer_behind_the_lock_polls_finely(store: Store) -> None:
    port = free_port()
    store.extra = ["-pprof-listen", f"127.0.0.1:{port}"]
    with store.run():
        before = counters(port)
        insert_behind_a_held_lock(store, f"busy_{uuid.uuid4().hex[:8]}")
        after = counters(port)
    waits = after["sqlite_busy_waits"] - before["sqlite_busy_waits"]
    polls = after["sqlite_busy_polls"] - before["sqlite_busy_polls"]
    assert waits >= 1, (before, after)
    # SQLite's handler makes 13 attempts in 300 ms; the wrapper's first 2 ms alone hold 20
    assert polls > 60, (before, after)
    assert after["sqlite_busy_gave_up"] == before["sqlite_busy_gave_up"]
    assert after["sqlite_busy_paused_us"] - before["sqlite_busy_paused_us"] >= 20_000


def test_busy_poll_zero_keeps_sqlites_handler(store: Store) -> None:
    port = free_port()
    store.extra = ["-pprof-listen", f"127.0.0.1:{port}", "-sqlite-busy-poll", "0"]
    with store.run():
        insert_behind_a_held_lock(store, f"busy_{uuid.uuid4().hex[:8]}")
        assert counters(port) == {"sqlite_busy_waits": 0, "sqlite_busy_polls": 0,
                                  "sqlite_busy_paused_us": 0, "sqlite_busy_gave_up": 0}

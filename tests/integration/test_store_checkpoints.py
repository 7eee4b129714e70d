"""The local store can checkpoint its WAL off the commit path (deploy/local/ferretdb/checkpoint.go).

SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1 000 pages and
fsyncs the WAL and the database file there; on a disk the broker writes to as well an fsync now
and then takes 0.1–1 s, and that insert waited as long (docs/local-stack.md). The wrapper turns
the automatic checkpoint off on FerretDB's connections and checkpoints from a connection of its
own every ``-checkpoint-interval`` (opt-in; 0, the default, keeps SQLite's), emptying the WAL
once it passes ``-wal-truncate-at``.

Each test starts its own FerretDB (the binary the local stack builds) and reads the database
file and its WAL from the outside: what was committed lives in the WAL until a checkpoint copies
it into the database file."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.localstack import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)

MB = 1 << 20
DOC = "x" * (60 * 1024)  # 100 of them: ~6 MB, past the 1 000 pages (4 MB) of SQLite's default


def write_6mb(s: Store, dbname: str) -> None:
    with s.client() as c:
        c[dbname]["items"].insert_many([{"_id": uuid.uuid4().hex, "text": DOC}
                                        for _ in range(100)])


def sizes(data: Path, dbname: str) -> tuple[int, int]:
    """(database file, WAL) in bytes."""
    db = data / f"{dbname}.sqlite"
    wal = data / f"{dbname}.sqlite-wal"
    return db.stat().st_size, (wal.stat().st_size if wal.exists() else 0)


def wait_for(check: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return False


def test_no_commit_checkpoints(store: Store) -> None:
    """With the wrapper's checkpoints an hour apart, 6 MB of inserts stay in the WAL: no commit
    ran a checkpoint (SQLite's automatic one would have copied the first 4 MB into the database
    file and started the WAL over, leaving it near 4 MB)."""
    store.extra = ["-checkpoint-interval", "1h"]
    dbname = f"ck{uuid.uuid4().hex[:8]}"
    with store.run():
        write_6mb(store, dbname)
        db, wal = sizes(store.data, dbname)
    assert wal >= 5 * MB, (db, wal)
    assert db < 1 * MB, (db, wal)


def test_the_wrapper_checkpoints_and_empties_a_large_wal(store: Store) -> None:
    """Every interval the wrapper copies what was committed into the database file; with the WAL
    past ``-wal-truncate-at`` it empties it as well."""
    store.extra = ["-checkpoint-interval", "200ms", "-wal-truncate-at", str(2 * MB)]
    dbname = f"ck{uuid.uuid4().hex[:8]}"
    with store.run():
        write_6mb(store, dbname)
        assert wait_for(lambda: sizes(store.data, dbname)[0] >= 5 * MB), \
            sizes(store.data, dbname)
        # emptied: without a TRUNCATE checkpoint SQLite never shrinks the WAL file (it stays at
        # its ~6 MB high-water mark); once emptied, a later small write — the wrapper's own
        # `_id` index on the new collection (idindex.go), if its sweep comes after the
        # checkpoint — may add a few frames, so "emptied" is "far below 6 MB", not "0 bytes"
        assert wait_for(lambda: sizes(store.data, dbname)[1] < 1 * MB), \
            sizes(store.data, dbname)
        with store.client() as c:  # and every document is still there
            assert c[dbname]["items"].count_documents({}) == 100


def test_by_default_sqlite_checkpoints_in_the_commit(store: Store) -> None:
    """The wrapper's checkpoints are opt-in: without the flag, SQLite's automatic checkpoint runs
    in a commit once the WAL is past 1 000 pages and copies what was committed into the database
    file.

    SQLite's automatic checkpoint is PASSIVE: a commit that finds another connection reading an
    older snapshot (FerretDB's pool, the wrapper's `_id` index sweep) copies only up to it, and
    may copy nothing (CI on 369d767: 16 KB copied of 6 MB). So after the 6 MB, small inserts go
    on committing until one of them has copied the 6 MB into the database file; with the
    automatic checkpoint off (``test_no_commit_checkpoints``, the wrapper's mode) no commit ever
    does."""
    dbname = f"ck{uuid.uuid4().hex[:8]}"
    with store.run(), store.client() as c:
        write_6mb(store, dbname)

        def copied() -> bool:
            c[dbname]["items"].insert_one({"_id": uuid.uuid4().hex, "text": "x"})
            return sizes(store.data, dbname)[0] >= 3 * MB

        assert wait_for(copied), sizes(store.data, dbname)

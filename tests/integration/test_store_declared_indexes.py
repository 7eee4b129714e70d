"""Storage declares only the secondary indexes that hold a rule no ``_id`` holds. Every query
the product issues on Items and calls is an ``_id`` equality (or an ``_id`` ``$in``), so:
- ``items.session_seq`` (unique ``(session_id, sequence)``), which an earlier version declared,
  is dropped: an Item's ``_id`` is ``<session_id>/<sequence>``, so the ``_id`` index already
  refuses a second Item at a sequence (tested below against the store);
- ``calls.calls_session`` served no query and is dropped;
- ``items.source_key`` (unique) stays: one Item per decision and sequence."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import ASCENDING, AsyncMongoClient
from pymongo.errors import DuplicateKeyError

from shared.settings import Settings
from shared.store import UNUSED_INDEXES, ensure_indexes
from shared.storecodec import item_doc

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)
SID = "session_" + "a" * 32


async def names(coll: Any) -> set[str]:
    return {i["name"] async for i in await coll.list_indexes()}


def _item(seq: int, item_id: str, source: str) -> dict[str, Any]:
    return item_doc({"id": item_id, "session_id": SID, "sequence": seq, "type": "turn",
                     "created_at": "2026-11-30T10:00:00Z", "turn_id": "turn_1",
                     "state": "started", "reason": None}, source)


async def test_a_fresh_store_gets_source_key_only(settings: Settings) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(settings.mongodb_uri)
    try:
        db = client[settings.mongodb_database]
        await ensure_indexes(db)
        assert await names(db.items) == {"_id_", "source_key"}
        assert "calls_session" not in await names(db.calls)
        # the rules the indexes hold, against the store itself
        await db.items.insert_one(_item(1, "item_" + "1" * 32, "req:r1#1"))
        with pytest.raises(DuplicateKeyError):  # a second Item at sequence 1: the _id
            await db.items.insert_one(_item(1, "item_" + "2" * 32, "req:r2#1"))
        with pytest.raises(DuplicateKeyError):  # the same decision and sequence: source_key
            doc = _item(2, "item_" + "3" * 32, "req:r1#1")
            await db.items.insert_one(doc)
        assert await db.items.count_documents({}) == 1
    finally:
        await client.close()


async def test_indexes_of_earlier_versions_are_dropped_and_the_data_stays(
        settings: Settings) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(settings.mongodb_uri)
    try:
        db = client[settings.mongodb_database]
        # as an earlier version left the collections
        await db.items.create_index([("session_id", ASCENDING), ("sequence", ASCENDING)],
                                    unique=True, name="session_seq")
        await db.items.create_index([("source_key", ASCENDING)], unique=True,
                                    name="source_key")
        await db.calls.create_index([("session_id", ASCENDING)], name="calls_session")
        await db.items.insert_one(_item(1, "item_" + "1" * 32, "req:r1#1"))
        await db.calls.insert_one({"_id": f"{SID}/call_1", "session_id": SID})
        for coll, dropped in UNUSED_INDEXES.items():
            assert set(dropped) <= await names(db[coll])

        await ensure_indexes(db)
        await ensure_indexes(db)  # idempotent
        assert await names(db.items) == {"_id_", "source_key"}
        assert await names(db.calls) == {"_id_"}
        assert await db.items.find_one({"_id": f"{SID}/1"}) is not None
        assert await db.calls.find_one({"_id": f"{SID}/call_1"}) is not None
    finally:
        await client.close()

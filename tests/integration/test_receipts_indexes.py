"""The receipt tracker declares no secondary index (every query of its repository is an ``_id``
equality or a whole-collection read), and drops the two an earlier version declared on
``pending_receipts``: they served no query and cost a b-tree write per insert and delete."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import ASCENDING, AsyncMongoClient

from services.receipts.repository import UNUSED_INDEXES, ReceiptRepository
from shared.settings import Settings

pytestmark = pytest.mark.integration


async def names(coll: Any) -> set[str]:
    return {i["name"] async for i in await coll.list_indexes()}


async def test_ensure_indexes_drops_the_unused_ones_and_adds_none(settings: Settings) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(settings.mongodb_uri)
    try:
        db = client[settings.mongodb_database]
        coll = db.pending_receipts
        # as the earlier version left the collection
        await coll.create_index([("session_id", ASCENDING)], name="pending_session")
        await coll.create_index([("deadline", ASCENDING)], name="pending_deadline")
        await coll.insert_one({"_id": "s:c", "session_id": "s", "deadline": 1.0})
        assert set(UNUSED_INDEXES) <= await names(coll)

        repo = ReceiptRepository(db)
        await repo.ensure_indexes()
        assert await names(coll) == {"_id_"}
        await repo.ensure_indexes()  # idempotent
        assert await names(coll) == {"_id_"}
        assert await coll.find_one({"_id": "s:c"}) is not None  # the data stays
    finally:
        await client.close()

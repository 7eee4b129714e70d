"""MongoDB-wire store plumbing: PyMongo's AsyncMongoClient (Motor is deprecated) and the indexes
every service relies on. Works on MongoDB and on FerretDB v1 (no transactions, no TTL, no change
streams): correctness rests on unique indexes and one writer per Session."""

from __future__ import annotations

import asyncio
from typing import Any

from pymongo import ASCENDING, AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from shared.settings import Settings

Doc = dict[str, Any]


def make_client(settings: Settings) -> AsyncMongoClient[Doc]:
    return AsyncMongoClient(
        settings.mongodb_uri,
        tz_aware=True,
        serverSelectionTimeoutMS=5_000,
        appname="session-core",
    )


def database(client: AsyncMongoClient[Doc], settings: Settings) -> AsyncDatabase[Doc]:
    return client[settings.mongodb_database]


async def ensure_indexes(db: AsyncDatabase[Doc]) -> None:
    # Items: one sequence per Session, and one Item per source fact (idempotent redelivery).
    await db.items.create_index(
        [("session_id", ASCENDING), ("sequence", ASCENDING)], unique=True, name="session_seq"
    )
    await db.items.create_index([("source_key", ASCENDING)], unique=True, name="source_key")
    await db.calls.create_index([("session_id", ASCENDING)], name="calls_session")
    await db.bindings.create_index([("runtime_id", ASCENDING)], name="bindings_runtime")
    await db.pending_receipts.create_index([("deadline", ASCENDING)], name="pending_deadline")


async def ping(client: AsyncMongoClient[Doc]) -> bool:
    try:
        await client.admin.command("ping")
        return True
    except Exception:
        return False


async def find_by_ids(coll: Any, ids: list[str]) -> dict[str, Doc]:
    """Documents by ``_id``, as concurrent primary-key lookups. On FerretDB v1/SQLite only
    ``{_id: <string>}`` equality is pushed down to an index (``$in`` scans the collection);
    on MongoDB both are index lookups. Every hot read of the services goes through here or
    through another ``_id`` equality."""
    unique = list(dict.fromkeys(ids))
    if not unique:
        return {}
    found = await asyncio.gather(*(coll.find_one({"_id": i}) for i in unique))
    return {d["_id"]: d for d in found if d is not None}

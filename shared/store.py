"""MongoDB-wire store plumbing: PyMongo's AsyncMongoClient (Motor is deprecated) and the indexes
every service relies on. Works on MongoDB and on FerretDB v1 (no transactions, no TTL, no change
streams): correctness rests on unique indexes and one writer per Session."""

from __future__ import annotations

import asyncio
from typing import Any

from pymongo import ASCENDING, AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure

from shared.metrics import STORE_LISTENER
from shared.settings import Settings
from shared.watch import Watch

Doc = dict[str, Any]

# The store is away (no server reachable, connection refused or reset, a network timeout):
# PyMongo raises these — ConnectionFailure is the base of AutoReconnect, NetworkTimeout,
# ServerSelectionTimeoutError and WaitQueueTimeoutError. Nothing else means "unreachable".
STORE_UNREACHABLE: tuple[type[Exception], ...] = (ConnectionFailure,)

def client_options(settings: Settings, server_selection_ms: int = 5_000) -> dict[str, Any]:
    """The client's keyword arguments. ``server_selection_ms`` bounds how long an operation
    waits for a reachable server before it raises; services on the request path pass
    ``store_request_timeout_ms`` so an outage answers 503 quickly instead of hanging. TLS may be
    set in ``MONGODB_URI`` (``tls=true``, ``tlsCAFile=…``); ``mongodb_tls_ca_file`` /
    ``mongodb_tls_certificate_key_file`` turn it on from settings instead, so a chart can mount
    the CA beside a URI kept in a Secret."""
    opts: dict[str, Any] = {
        "tz_aware": True,
        "serverSelectionTimeoutMS": server_selection_ms,
        "connectTimeoutMS": min(server_selection_ms, 20_000),
        "appname": "session-core",
        # store round trips and their latency (session_core_store_commands_total, …)
        "event_listeners": [STORE_LISTENER],
    }
    if settings.mongodb_tls_ca_file or settings.mongodb_tls_certificate_key_file:
        opts["tls"] = True
    if settings.mongodb_tls_ca_file:
        opts["tlsCAFile"] = settings.mongodb_tls_ca_file
    if settings.mongodb_tls_certificate_key_file:
        opts["tlsCertificateKeyFile"] = settings.mongodb_tls_certificate_key_file
    return opts


def make_client(settings: Settings, server_selection_ms: int = 5_000) -> AsyncMongoClient[Doc]:
    return AsyncMongoClient(settings.mongodb_uri, **client_options(settings, server_selection_ms))


def database(client: AsyncMongoClient[Doc], settings: Settings) -> AsyncDatabase[Doc]:
    return client[settings.mongodb_database]


async def ensure_indexes(db: AsyncDatabase[Doc]) -> None:
    # Items: one sequence per Session, and one Item per source fact (idempotent redelivery).
    await db.items.create_index(
        [("session_id", ASCENDING), ("sequence", ASCENDING)], unique=True, name="session_seq"
    )
    await db.items.create_index([("source_key", ASCENDING)], unique=True, name="source_key")
    await db.calls.create_index([("session_id", ASCENDING)], name="calls_session")


async def ping(client: AsyncMongoClient[Doc]) -> bool:
    try:
        await client.admin.command("ping")
        return True
    except Exception:
        return False


def store_watch(client: AsyncMongoClient[Doc], fresh_s: float = 1.0) -> Watch:
    """The store answered a ping lately; ``require()`` raises ``ConnectionFailure`` (→ 503)."""
    return Watch(lambda: ping(client),
                 lambda: ConnectionFailure("the store did not answer a ping"), fresh_s)


PK_LOOKUPS_MAX = 8  # Items read back per page when a refused steer's messages are looked up
LOOKUPS_IN_FLIGHT = 64  # concurrent ``_id`` lookups of one call (the client pool holds 100)


async def _bounded(calls: list[Any]) -> list[Any]:
    out: list[Any] = []
    for i in range(0, len(calls), LOOKUPS_IN_FLIGHT):
        out.extend(await asyncio.gather(*(c() for c in calls[i:i + LOOKUPS_IN_FLIGHT])))
    return out


async def find_by_ids(coll: Any, ids: list[str]) -> dict[str, Doc]:
    """Documents by ``_id``, as concurrent single ``_id`` equality lookups. FerretDB v1 pushes
    down only ``{_id: <string or ObjectId>}`` alone: an ``$in`` (or any other filter) is a
    scan of the whole collection, whose cost grows with everything ever stored (measured on
    the SQLite backend: ``$in`` of 100 keys, 0.76 s at 20 000 documents). With the exact-
    expression index the local stack adds (docs/local-stack.md) an equality lookup is an index
    lookup on FerretDB, and it is one on MongoDB; so every key goes as its own lookup,
    ``LOOKUPS_IN_FLIGHT`` at a time (one round trip of latency for up to that many keys)."""
    unique = list(dict.fromkeys(ids))
    if not unique:
        return {}
    found = await _bounded([lambda i=i: coll.find_one({"_id": i}) for i in unique])
    return {d["_id"]: d for d in found if d is not None}


async def delete_by_ids(coll: Any, ids: list[str]) -> None:
    """Deletes by ``_id``, each a single ``_id`` equality (the same reason as ``find_by_ids``)."""
    unique = list(dict.fromkeys(ids))
    await _bounded([lambda i=i: coll.delete_one({"_id": i}) for i in unique])

"""MongoDB-wire store plumbing: PyMongo's AsyncMongoClient (Motor is deprecated) and the indexes
every service relies on. Works on MongoDB and on FerretDB v1 (no transactions, no TTL, no change
streams): correctness rests on unique indexes and one writer per Session."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable
from typing import Any

from pymongo import ASCENDING, AsyncMongoClient, DeleteOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ConnectionFailure

from shared.logging import get_logger
from shared.metrics import STORE_LISTENER
from shared.settings import OWN_DATABASE_FIELDS, Settings
from shared.watch import Watch

Doc = dict[str, Any]
log = get_logger(__name__)

# The store is away (no server reachable, connection refused or reset, a network timeout):
# PyMongo raises these — ConnectionFailure is the base of AutoReconnect, NetworkTimeout,
# ServerSelectionTimeoutError and WaitQueueTimeoutError. Nothing else means "unreachable".
STORE_UNREACHABLE: tuple[type[Exception], ...] = (ConnectionFailure,)

# Every write the services make is acknowledged only once a majority of the replica set holds
# it in its journal (MongoDB: w "majority", j true): a 201 "stored", a published Item or a
# verdict never rests on one member's memory, so neither a primary's crash nor a fail-over loses
# it (docs/storage.md, "The store's write concern"). Given as client options, which take
# precedence over the URI's, so a MONGODB_URI cannot relax it. FerretDB accepts and ignores it;
# the local stack's own durability is SQLite's synchronous=FULL (docs/local-stack.md).
WRITE_CONCERN: dict[str, Any] = {"w": "majority", "journal": True}


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
        **WRITE_CONCERN,
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


def own_databases(base: str) -> dict[str, str]:
    """Settings (field → value) that give the receipt tracker and the dispatcher a database of
    their own beside ``base``: on FerretDB's SQLite backend a database is one file with one
    writer, and the tracker's claims and the dispatcher's writes would take turns with
    storage's commits (docs/storage.md, "A writer per database"). The local stack, the tests
    and the bench use it."""
    return {field: f"{base}_{service}" for service, field in OWN_DATABASE_FIELDS.items()}


def own_databases_env(base: str) -> dict[str, str]:
    """``own_databases`` as the services' environment."""
    return {f"SESSION_CORE_{k.upper()}": v for k, v in own_databases(base).items()}


def database(client: AsyncMongoClient[Doc], settings: Settings, service: str = "storage"
             ) -> AsyncDatabase[Doc]:
    """The database of ``service``'s collections (``Settings.database_of``; admission reads
    storage's)."""
    return client[settings.database_of(service)]


# Indexes older versions declared that are dropped: ``items.session_seq``, unique
# ``(session_id, sequence)``, is the ``_id`` itself (``storekeys.item_key``:
# ``<session_id>/<sequence>``, one constructor, ``storecodec.item_doc``), so the ``_id`` index
# holds the same constraint; no query reads Items by anything but ``_id``. It cost every Item
# insert a third b-tree write (FerretDB v1/SQLite: 400 Items 29.5–31.2 → 24.7–27.3 ms).
# ``calls.calls_session`` served no query (a call is read by its ``_id``,
# ``storekeys.call_key``) and cost every call insert and update a b-tree write.
UNUSED_INDEXES = {"items": ("session_seq",), "calls": ("calls_session",)}


async def ensure_indexes(db: AsyncDatabase[Doc]) -> None:
    # Items: one sequence per Session is the ``_id`` (above); one Item per decision and
    # sequence (idempotent redelivery) is ``source_key``.
    await db.items.create_index([("source_key", ASCENDING)], unique=True, name="source_key")
    for coll, names in UNUSED_INDEXES.items():
        await drop_indexes(db[coll], names)


async def drop_indexes(coll: AsyncCollection[Doc], names: Iterable[str]) -> None:
    """Drop the named indexes the collection holds (an index an older version declared and
    this one does not); idempotent."""
    held = {i["name"] async for i in await coll.list_indexes()}
    for name in names:
        if name in held:
            await coll.drop_index(name)


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
IDS_PER_IN = 1_000  # keys per ``$in`` command where the store serves it from its _id index


async def _bounded(calls: list[Any]) -> list[Any]:
    out: list[Any] = []
    for i in range(0, len(calls), LOOKUPS_IN_FLIGHT):
        out.extend(await asyncio.gather(*(c() for c in calls[i:i + LOOKUPS_IN_FLIGHT])))
    return out


# What each client's store said about ``{_id: {$in: [...]}}`` (``ids_in_served``).
_IN_SERVED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def in_served_by(explain: Doc) -> bool | None:
    """Whether an ``explain`` of a find by ``_id`` ``$in`` says the store serves it from its
    ``_id`` index; ``None``: it cannot say yet. FerretDB v1 answers ``filterPushdown``: true
    only where the filter reaches SQL (the local stack's build, deploy/local/ferretdb/_overlay;
    upstream v1 scans the collection for any ``$in``), and false for a collection that does not
    exist yet, whose plan is empty (asked again later). MongoDB has no such field: its ``$in``
    on ``_id`` is always an index look-up."""
    if "filterPushdown" not in explain:
        return True
    planner = explain.get("queryPlanner")
    if not explain["filterPushdown"] and not planner:
        return None
    return bool(explain["filterPushdown"])


async def ids_in_served(coll: Any) -> bool:
    """Whether ``coll``'s store serves an ``_id`` ``$in`` from its index, asked once per client
    (``explain``; a store that cannot explain is taken to scan) and logged."""
    client = coll.database.client
    known = _IN_SERVED.get(client)
    if known is not None:
        return known
    try:
        out = await coll.database.command(
            "explain", {"find": coll.name, "filter": {"_id": {"$in": ["a", "b"]}}})
        served = in_served_by(out)
    except STORE_UNREACHABLE:
        raise
    except Exception as exc:  # e.g. a store without ``explain``: equality look-ups are safe
        log.warning("store.explain_failed", error=repr(exc)[:200])
        served = False
    if served is None:
        return False
    _IN_SERVED[client] = served
    log.info("store.ids_in", served=served, collection=coll.name)
    return served


async def _in_chunks(coll: Any, unique: list[str]) -> list[list[str]] | None:
    """The keys in ``$in`` commands of at most ``IDS_PER_IN``, where that is the way to send
    them: more than one key, and the store serves an ``_id`` ``$in`` from its index. ``None``:
    one ``_id`` equality per key (no key: an empty list of commands)."""
    if not unique:
        return []
    if len(unique) == 1 or not await ids_in_served(coll):
        return None
    return [unique[i:i + IDS_PER_IN] for i in range(0, len(unique), IDS_PER_IN)]


async def find_by_ids(coll: Any, ids: list[str]) -> dict[str, Doc]:
    """Documents by ``_id`` in one round trip per ``IDS_PER_IN`` keys where the store serves an
    ``$in`` on ``_id`` from its index (MongoDB; the local stack's FerretDB, patched to push it
    down: docs/local-stack.md). Elsewhere — upstream FerretDB v1 pushes down only a lone
    ``{_id: <string or ObjectId>}``, so an ``$in`` scans the whole collection (measured on the
    SQLite backend: ``$in`` of 100 keys, 0.76 s at 20 000 documents) — every key goes as its own
    equality look-up, ``LOOKUPS_IN_FLIGHT`` at a time (one round trip of latency for up to that
    many keys, and a command each)."""
    unique = list(dict.fromkeys(ids))
    chunks = await _in_chunks(coll, unique)
    if chunks is not None:
        out: dict[str, Doc] = {}
        for chunk in chunks:  # all in the first batch, cursor closed (≤ 16 MB)
            async for d in coll.find({"_id": {"$in": chunk}}, batch_size=len(chunk) + 1):
                out[d["_id"]] = d
        return out
    found = await _bounded([lambda i=i: coll.find_one({"_id": i}) for i in unique])
    return {d["_id"]: d for d in found if d is not None}


async def delete_by_ids(coll: Any, ids: list[str]) -> None:
    """Deletes by ``_id``: one ``delete_many`` of an ``$in`` per ``IDS_PER_IN`` keys where the
    store serves it from its index (``find_by_ids``), else one bulk write of ``_id`` equality
    deletes (one round trip; on FerretDB v1 a statement each)."""
    unique = list(dict.fromkeys(ids))
    chunks = await _in_chunks(coll, unique)
    if chunks is not None:
        for chunk in chunks:
            await coll.delete_many({"_id": {"$in": chunk}})
    else:
        await coll.bulk_write([DeleteOne({"_id": i}) for i in unique], ordered=False)

"""A look-up of many ``_id``s is one command, served from the ``_id`` index, on the local store.

Upstream FerretDB v1 pushes down to SQL only a lone ``{_id: <string or ObjectId>}``: an ``$in``
scans the whole collection. The local stack's build pushes down a lone ``_id`` ``$in`` of
strings / ObjectIds too (deploy/local/ferretdb/_overlay/internal/backends/sqlite/collection.go),
as ``WHERE _ferretdb_sjson->'$._id' IN (…)``, which the wrapper's index serves
(deploy/local/ferretdb/idindex.go). ``shared.store.find_by_ids`` / ``delete_by_ids`` ask the
store once (``explain``) and then send one command per batch of keys instead of one per key.

These tests start their own FerretDB (the binary the local stack builds) and read the store's
own query plan, and count the commands the product's async client sends."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from shared import store as storemod
from tests.integration.test_store_index import find_plan, indexed, wait_indexed
from tests.support.localstack import Store

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)


def in_plan(db: Any, coll: str, keys: list[Any]) -> tuple[bool, list[str]]:
    out = db.command("explain", {"find": coll, "filter": {"_id": {"$in": keys}}})
    return bool(out.get("filterPushdown")), [str(x) for x in out["queryPlanner"].get("Plan", [])]


def test_an_id_in_is_pushed_down_and_served_from_the_index(store: Store) -> None:
    dbname = f"in_{uuid.uuid4().hex[:8]}"
    with store.run():
        client = store.client()
        try:
            db = client[dbname]
            db["c"].insert_many([{"_id": f"k{i:05d}", "n": i} for i in range(3000)])
            assert indexed(wait_indexed(db, "c", "k00001"))
            keys = ["k00007", "k02999", "k01500", "absent"]
            pushed, plan = in_plan(db, "c", keys)
            assert pushed, plan
            assert indexed(plan), plan  # SEARCH … USING INDEX, no SCAN
            got = sorted(d["n"] for d in db["c"].find({"_id": {"$in": keys}}))
            assert got == [7, 1500, 2999]
            # the lone equality is still pushed down as upstream does
            assert indexed(find_plan(db, "c", "k00042"))
            # what is not a lone string/ObjectId $in is not pushed down, and stays correct: the
            # store still applies the whole filter to what it reads
            for flt, want in (
                ({"_id": {"$in": ["k00001", 5]}}, [1]),
                ({"_id": {"$in": ["k00001", "k00002"], "$ne": "k00002"}}, [1]),
                ({"_id": {"$in": []}}, []),
                ({"_id": {"$in": ["k00003"]}, "n": 4}, []),
            ):
                out = db.command("explain", {"find": "c", "filter": flt})
                assert out["filterPushdown"] is False, (flt, out)
                assert sorted(d["n"] for d in db["c"].find(flt)) == want, flt
            # deletes by $in: the handler's query is the same pushed-down one
            assert db["c"].delete_many({"_id": {"$in": ["k00010", "k00011", "x"]}}).deleted_count \
                == 2
            assert db["c"].count_documents({}) == 2998
        finally:
            client.close()


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.names: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.names.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_find_and_delete_by_ids_are_one_command_for_many_keys(store: Store) -> None:
    dbname = f"in_{uuid.uuid4().hex[:8]}"
    with store.run():
        sync = store.client()
        try:
            sync[dbname]["c"].insert_many([{"_id": f"k{i:05d}", "n": i} for i in range(1500)])
            assert indexed(wait_indexed(sync[dbname], "c", "k00001"))
        finally:
            sync.close()
        seen = Commands()
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            f"mongodb://127.0.0.1:{store.port}/", event_listeners=[seen])
        try:
            coll = client[dbname]["c"]
            # a collection that does not exist yet cannot say: equality look-ups, asked again
            assert await storemod.ids_in_served(client[dbname]["none"]) is False
            assert client not in storemod._IN_SERVED
            keys = [f"k{i:05d}" for i in range(0, 1500, 5)] + ["absent", "k00000"]
            seen.names.clear()
            found = await storemod.find_by_ids(coll, keys)
            assert sorted(found) == sorted(f"k{i:05d}" for i in range(0, 1500, 5))
            assert found["k00005"] == {"_id": "k00005", "n": 5}
            assert seen.names == ["explain", "find"], seen.names  # asked once, one find
            seen.names.clear()
            assert len(await storemod.find_by_ids(coll, keys[:10])) == 10
            assert seen.names == ["find"]
            seen.names.clear()
            await storemod.delete_by_ids(coll, keys)
            assert seen.names == ["delete"]
            assert await coll.count_documents({}) == 1500 - 300
            assert await storemod.find_by_ids(coll, keys) == {}
            # a store that does not serve $in from its index (upstream FerretDB v1): a command
            # per key, never an $in that would scan
            storemod._IN_SERVED[client] = False
            seen.names.clear()
            rest = [f"k{i:05d}" for i in range(1, 51) if i % 5]  # 40 still there
            assert len(await storemod.find_by_ids(coll, rest)) == 40
            assert seen.names == ["find"] * 40
            seen.names.clear()
            await storemod.delete_by_ids(coll, rest)
            assert seen.names == ["delete"]  # one bulk write of equality deletes
            assert await coll.count_documents({}) == 1500 - 340
        finally:
            await client.close()

"""Storage's clean handovers (``services/storage/decided.py``, "current"; docs/storage.md): a
replica that stops cleanly marks its shards ``clean``, and the next one reads a Session it does
not hold in memory from its document alone; a replica that dies holding a shard leaves it
``held``, and the next one looks for Items past the document (``roll_forward``) as before. On
the real stack: Kafka, the store, storage replicas in this process."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client import REGISTRY

from services.storage.app import StorageService
from services.storage.repository import GENESIS
from shared.kafka import encode
from shared.store import database, make_client
from shared.storecodec import item_from_doc
from tests.support.builders import admitted_create, admitted_event
from tests.support.system import System, SystemFactory

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)

Json = dict[str, Any]


async def publish(system: System, rec: Json) -> int:
    """Send an admitted record as admission does; the partition it went to."""
    producer = AIOKafkaProducer(bootstrap_servers=system.settings.kafka_bootstrap_servers,
                                acks="all")
    await producer.start()
    try:
        meta = await producer.send_and_wait(system.topics.session_admitted, encode(rec),
                                            key=rec["session_id"].encode())
        return int(meta.partition)
    finally:
        await producer.stop()


async def stored(system: System, rec: Json) -> int:
    """Publish a message record and wait for its Item; the record's partition."""
    partition = await publish(system, rec)
    text = rec["messages"][0]["content"][0]["text"]
    await system.items.wait_for(rec["session_id"], lambda i: i["type"] == "message" and any(
        p.get("text") == text for p in i["content"]))
    return partition


def cold(check: str) -> float:
    return REGISTRY.get_sample_value("session_core_storage_cold_sessions_total",
                                     {"check": check}) or 0.0


async def mark(storage: StorageService, shard: int) -> Json | None:
    """The shard's mark, read on a client of its own (``storage`` may be stopped)."""
    client = make_client(storage.settings)
    try:
        doc: Json | None = await database(client, storage.settings).handovers.find_one(
            {"_id": storage.handovers.key(shard)})
        return doc
    finally:
        await client.close()


async def test_a_clean_stop_hands_over_current_documents_and_a_dead_holder_leaves_a_probe(
        make_system: SystemFactory) -> None:
    system = await make_system(services=("storage",))  # a fresh store: marked from genesis
    first = system.storage
    create = admitted_create("first")
    sid = create["session_id"]
    shard = await stored(system, create)
    assert (await mark(first, shard)) == {  # held while it writes the shard
        "_id": first.handovers.key(shard), "state": "held", "holder": first.handovers.holder}
    await first.stop()  # drained, nothing failed: clean
    assert (await mark(first, shard) or {})["state"] == "clean"

    second = StorageService(system.settings)
    third = StorageService(system.settings)
    try:
        await second.start()
        trusted, probed = cold("trusted"), cold("probed")
        await stored(system, admitted_event(sid, "second"))
        # not in its memory; read from the document alone
        assert (cold("trusted"), cold("probed")) == (trusted + 1, probed)
        # ``kill -9``: it leaves the group and never releases; the shard stays held by it
        await second.broker.stop()
        assert (await mark(second, shard) or {})["holder"] == second.handovers.holder
        await third.start()
        trusted, probed = cold("trusted"), cold("probed")
        await stored(system, admitted_event(sid, "third"))
        assert (cold("trusted"), cold("probed")) == (trusted, probed + 1)  # Items looked for
        # the dead holder's late release must not mark what another replica holds now
        await second.handovers.release({shard})
        assert (await mark(third, shard)) == {
            "_id": third.handovers.key(shard), "state": "held", "holder": third.handovers.holder}
        await third.stop()  # it inherited "held": it cannot say clean either
        assert (await mark(third, shard) or {})["state"] == "held"
    finally:
        await third.stop()
        await second.stop()

    fourth = StorageService(system.settings)
    try:
        await fourth.start()
        probed = cold("probed")
        await stored(system, admitted_event(sid, "fourth"))
        assert cold("probed") == probed + 1
    finally:
        await fourth.stop()
    client = make_client(system.settings)
    try:
        items = await database(client, system.settings).items.find(
            {"session_id": sid}).to_list()
    finally:
        await client.close()
    texts = [item_from_doc(d)["content"][0]["text"]
             for d in sorted(items, key=lambda d: d["sequence"]) if d["type"] == "message"]
    assert texts == ["first", "second", "third", "fourth"]


async def test_a_store_written_before_the_marks_is_probed(make_system: SystemFactory) -> None:
    """No genesis where the store already held Sessions when the marks began: a shard
    without a mark is not clean."""
    system = await make_system(services=("storage",))
    create = admitted_create("before the marks")
    shard = await stored(system, create)
    await system.stop_service("storage")
    later = StorageService(system.settings)
    await later.repo.db.handovers.delete_many({})  # as a store of an older release
    try:
        await later.start()
        assert await later.repo.db.handovers.find_one({"_id": GENESIS}) is None
        probed = cold("probed")
        assert await stored(system, admitted_event(create["session_id"], "after")) == shard
        assert cold("probed") == probed + 1
    finally:
        await later.stop()

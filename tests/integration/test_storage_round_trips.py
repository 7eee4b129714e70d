"""Storage's store path costs a constant number of round trips per batch.

A PyMongo ``CommandListener`` counts the commands one ``StorageHandler.handle`` sends to the real
store. For a batch of messages to Sessions this replica owns (trusted, in its memory) the count is
the same for 1, 8 and 32 records — whether the records go to one Session or to as many Sessions —
and there is no read at all; the Session writes are one bulk write, filtered by ``_id`` alone
(one ``update`` command per ``SESSIONS_PER_UPDATE`` Sessions: FerretDB v1 deadlocks on an
``update`` of 100 statements, see repository.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymongo import AsyncMongoClient, monitoring

from services.storage.handler import StorageHandler
from services.storage.repository import SESSIONS_PER_UPDATE, StorageRepository
from shared import itemstore, records
from shared.kafka import now_rfc3339
from shared.settings import Settings
from shared.store import client_options, ensure_indexes
from shared.storekeys import verdict_fact_id
from tests.support.builders import admitted_create, admitted_event

pytestmark = pytest.mark.integration


class Commands(monitoring.CommandListener):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in ("ping", "isMaster", "hello", "endSessions"):
            return
        self.seen.append((event.command_name, event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


@pytest.fixture
async def counted(settings: Settings) -> AsyncIterator[tuple[StorageHandler, Commands]]:
    listener = Commands()
    opts = client_options(settings)
    opts["event_listeners"] = [*opts.get("event_listeners", []), listener]
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(settings.mongodb_uri, **opts)
    db = client[settings.mongodb_database]
    await ensure_indexes(db)
    handler = StorageHandler(StorageRepository(db, 64 * 1024, 256 * 1024), now_rfc3339)
    try:
        yield handler, listener
    finally:
        await client.close()


async def _count(handler: StorageHandler, listener: Commands, batch: list[Any]
                 ) -> list[tuple[str, Any]]:
    listener.seen.clear()
    await handler.handle(batch)
    return list(listener.seen)


def _names(cmds: list[tuple[str, Any]]) -> list[str]:
    return [f"{name}:{cmd.get(name)}" for name, cmd in cmds]


async def test_round_trips_per_batch_are_constant_in_batch_size(
        counted: tuple[StorageHandler, Commands]) -> None:
    handler, listener = counted
    creates = [admitted_create(f"s{i}") for i in range(3 * SESSIONS_PER_UPDATE + 1)]
    await handler.handle(creates)  # the Sessions are this replica's now (trusted, cached)
    sids = [c["session_id"] for c in creates]
    shapes = {}
    for n in (1, 8, SESSIONS_PER_UPDATE):
        across = await _count(handler, listener, [admitted_event(s, "m") for s in sids[:n]])
        one = await _count(handler, listener, [admitted_event(sids[0], "m") for _ in range(n)])
        shapes[n] = (_names(across), _names(one))
        for cmds in (across, one):
            assert not [c for c, _ in cmds if c in ("find", "aggregate", "count")], cmds
            updates = [cmd for c, cmd in cmds if c == "update"]
            assert len(updates) == 1, cmds
            # every Session write is filtered by _id alone (FerretDB v1 indexes nothing else)
            assert all(list(u["q"]) == ["_id"] for u in updates[0]["updates"])
    assert shapes[1] == shapes[8] == shapes[SESSIONS_PER_UPDATE], shapes
    assert shapes[1][0] == ["insert:items", "insert:journal", "update:sessions"], shapes[1]
    # past SESSIONS_PER_UPDATE Sessions: one more update command per that many, no more
    many = await _count(handler, listener, [admitted_event(s, "m") for s in sids])
    assert _names(many) == ["insert:items", "insert:journal"] + ["update:sessions"] * 4, many


async def test_a_batch_of_verdicts_writes_only_its_items_and_journal(
        counted: tuple[StorageHandler, Commands]) -> None:
    """A call's verdict is its journal entry: no document of its own (verdicts come in bursts
    of thousands as deadlines pass), and ``GET …/tool_results`` reads it from there."""
    handler, listener = counted
    creates = [admitted_create(f"v{i}") for i in range(8)]
    await handler.handle(creates)
    sids = [c["session_id"] for c in creates]
    verdicts = [records.fact_record(sid, verdict_fact_id(sid, f"call_{n}"), {
        "kind": "application", "call_id": f"call_{n}", "state": "uncertain",
        "reason": "no matching native receipt"}) for sid in sids for n in range(4)]
    cmds = await _count(handler, listener, verdicts)
    assert _names(cmds) == ["insert:items", "insert:journal", "update:sessions"], cmds
    db = handler.repo.db
    got = await itemstore.verdict(db, sids[3], "call_2")
    assert got is not None and got["at"], got
    assert (got["state"], got["reason"]) == ("uncertain", "no matching native receipt")
    assert await itemstore.verdict(db, sids[3], "call_9") is None
    # a second verdict for the call replays the first (the first verdict stands)
    again = records.fact_record(sids[3], verdict_fact_id(sids[3], "call_2"), {
        "kind": "application", "call_id": "call_2", "state": "applied", "reason": None})
    out = await handler.handle([again])
    assert [i["state"] for i in out.items] == ["uncertain"]
    assert (await itemstore.verdict(db, sids[3], "call_2") or {})["state"] == "uncertain"


async def test_sessions_not_in_memory_are_read_in_a_constant_number_of_round_trips(
        counted: tuple[StorageHandler, Commands]) -> None:
    """A replica that does not hold the Sessions (a restart, a new owner, more Sessions than
    it keeps) reads them back: one ``find`` per collection per batch, whether the batch has 1,
    8 or 32 Sessions — an ``_id`` ``$in`` where the store serves it from its index (MongoDB;
    the local stack's FerretDB: tests/integration/test_store_ids_in.py)."""
    handler, listener = counted
    creates = [admitted_create(f"c{i}") for i in range(1 + 1 + 8 + SESSIONS_PER_UPDATE)]
    await handler.handle(creates)
    await handler.repo.session_writer.drain(10)
    sids = [c["session_id"] for c in creates]
    cold = StorageHandler(handler.repo, now_rfc3339)  # nothing in its memory, nothing trusted
    await cold.handle([admitted_event(sids[0], "m")])  # the client asks the store once
    shapes: dict[int, list[str]] = {}
    at = 1
    for n in (1, 8, SESSIONS_PER_UPDATE):
        batch = [admitted_event(s, "m") for s in sids[at:at + n]]
        at += n
        cmds = await _count(cold, listener, batch)
        shapes[n] = [f"{name}:{cmd.get(name)}" for name, cmd in cmds if name == "find"]
        if n > 1:  # the Sessions' documents in one command, by _id alone
            sessions = [cmd for name, cmd in cmds if name == "find" and cmd["find"] == "sessions"]
            assert [sorted(s["filter"]["_id"]["$in"]) for s in sessions] \
                == [sorted(sids[at - n:at])], sessions
        # decided from the store's state: the message's Item follows the Session's last one
        before, after = handler.decided.session(sids[at - 1]), cold.decided.session(sids[at - 1])
        assert before is not None and after is not None
        assert after.last_sequence == before.last_sequence + 1, (before, after)
    assert shapes[1] == shapes[8] == shapes[SESSIONS_PER_UPDATE], shapes
    assert "find:sessions" in shapes[1], shapes

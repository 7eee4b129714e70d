"""A storage replica's writes take turns (services/storage/repository.py, ``turn``): never two of
its write commands in the store at once, so that on SQLite (one writer; the others poll with
sleeps of up to 100 ms) a batch's commit does not wait behind the Session writer in sleep quanta.
The store here is a stand-in that counts write commands in flight (a unit test of one object);
the real store's side is tests/integration/test_storage.py."""

from __future__ import annotations

import asyncio
from typing import Any

from services.storage.domain.sessions import Decision
from services.storage.repository import SESSIONS_PER_UPDATE, StorageRepository

Doc = dict[str, Any]


class Counting:
    """Collections whose writes take ``delay`` seconds and record how many overlap."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.in_flight = 0
        self.most = 0
        self.commands: list[str] = []

    async def _write(self, name: str) -> None:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        self.commands.append(name)
        try:
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)

    def __getattr__(self, name: str) -> Any:
        store = self

        class Coll:
            async def insert_many(self, docs: list[Doc], ordered: bool = True) -> None:
                await store._write(f"{name}.insert_many")

            async def bulk_write(self, ops: list[Any], ordered: bool = True) -> None:
                await store._write(f"{name}.bulk_write")

        return Coll()


def _states(n: int) -> dict[str, Doc]:
    return {f"s{i}": {"_id": f"s{i}", "version": 2, "last_sequence": 1} for i in range(n)}


async def test_a_commit_and_the_session_writer_never_write_at_once() -> None:
    db = Counting(delay=0.01)
    repo = StorageRepository(db, 1024, 1024)  # type: ignore[arg-type]
    doc, _ = repo.journal_doc(Decision(source_key="k1", session_id="s0"))
    sessions = asyncio.create_task(repo._advance_sessions(_states(4 * SESSIONS_PER_UPDATE)))
    await asyncio.sleep(0)  # the Session writer's first command is in the store
    await asyncio.gather(repo.commit([doc], []), repo.apply_rest([doc]), sessions)
    assert db.commands.count("sessions.bulk_write") == 4
    assert "journal.insert_many" in db.commands
    assert db.most == 1, db.commands


async def test_the_commit_waits_for_one_session_command_not_for_all() -> None:
    db = Counting(delay=0.01)
    repo = StorageRepository(db, 1024, 1024)  # type: ignore[arg-type]
    doc, _ = repo.journal_doc(Decision(source_key="k1", session_id="s0"))
    sessions = asyncio.create_task(repo._advance_sessions(_states(4 * SESSIONS_PER_UPDATE)))
    await asyncio.sleep(0)
    await repo.commit([doc], [])
    # first come, first served: the journal went in after the first Session command
    assert db.commands.index("journal.insert_many") == 1, db.commands
    await sessions

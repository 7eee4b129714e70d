"""Storage's commit point (``StorageRepository.commit``) when Items are already at a batch's
places, over the in-memory store: another decision's Items stop the batch (``StaleDecision``);
the record's own Items from an attempt that died before its journal entry was written take the
new attempt's content — the content the journal then holds and the Items published carry — and
the Items of a record the journal already holds are never rewritten."""

from __future__ import annotations

import pytest
from pymongo.errors import AutoReconnect

from services.storage.domain.sessions import decide_create
from services.storage.repository import StaleDecision, StorageRepository
from shared.storecodec import item_from_doc
from tests.support.fakes.storage import MemoryDatabase

SID = "session_1"


async def commit(repo: StorageRepository, now: str) -> list[dict[str, object]]:
    d = decide_create({
        "request_id": "req_1", "session_id": SID, "harness": "codex", "placement": "none",
        "event_id": "evt_1", "fingerprint": "fp",
        "messages": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}, now)
    doc, chunks = repo.journal_doc(d)
    await repo.commit([doc], chunks)
    return d.items


async def test_the_items_of_an_attempt_that_died_before_its_journal_take_the_new_content(
        ) -> None:
    db = MemoryDatabase()
    repo = StorageRepository(db, 1 << 20, 1 << 20)  # type: ignore[arg-type]
    db.kill_after(2)  # the Items written, the journal entry not: the store dies
    with pytest.raises(AutoReconnect):
        await commit(repo, "2026-01-01T00:00:00.000Z")
    db.revive()
    assert not db.journal.docs and len(db.items.docs) == 2
    items = await commit(repo, "2026-01-01T00:00:05.000Z")  # decided again, later
    stored = sorted((item_from_doc(d) for d in db.items.docs.values()),
                    key=lambda i: int(i["sequence"]))
    assert stored == items
    assert {i["created_at"] for i in stored} == {"2026-01-01T00:00:05.000Z"}


async def test_the_items_of_a_journaled_record_are_never_rewritten() -> None:
    db = MemoryDatabase()
    repo = StorageRepository(db, 1 << 20, 1 << 20)  # type: ignore[arg-type]
    first = await commit(repo, "2026-01-01T00:00:00.000Z")
    with pytest.raises(StaleDecision):
        await commit(repo, "2026-01-01T00:00:05.000Z")
    assert sorted((item_from_doc(d) for d in db.items.docs.values()),
                  key=lambda i: int(i["sequence"])) == first

"""The receipt tracker's collections, and only these:

* ``pending_receipts`` — a pending call's expected receipt and its deadline (durable windows);
* ``receipt_verdicts`` — one claim per call (unique ``_id``): two replicas never both publish;
* ``early_observations`` — observations no tracked call took yet, kept one window;
* ``receipt_calls`` — what matching needs beyond the delivery (the harness, the function name,
  the native ids), learned from the harness's own function-call observations.

Every query is by ``_id`` — an equality, a bulk write of them, or an ``$in`` where the store
serves it from its index (upstream FerretDB v1 indexes nothing else: ``shared.store.find_by_ids``)
— except the periodic sweep of old early observations."""

from __future__ import annotations

import contextlib
from typing import Protocol

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from shared.domain.receipts import Expected
from shared.store import Doc, delete_by_ids, drop_indexes, find_by_ids

DUPLICATE_KEY = 11000
# indexes that no query uses, dropped where a store still has them on ``pending_receipts``
# (index upkeep on every insert and delete)
UNUSED_INDEXES = ("pending_session", "pending_deadline")


def _duplicates(exc: BulkWriteError) -> list[int]:
    """The indexes of the documents whose ``_id`` was taken; raises on any other error."""
    errors = exc.details.get("writeErrors", [])
    if any(e.get("code") != DUPLICATE_KEY for e in errors):
        raise exc
    return [int(e["index"]) for e in errors]


def expected_doc(e: Expected) -> Doc:
    return {
        "harness": e.harness, "session_id": e.session_id, "call_id": e.call_id, "name": e.name,
        "success": e.success, "content": [{"kind": k, "digest": d} for k, d in e.content],
        "native_session_id": e.native_session_id, "thread_id": e.thread_id,
        "turn_id": e.turn_id, "joined": e.joined,
    }


def expected_from(doc: Doc) -> Expected:
    return Expected(
        harness=doc["harness"], session_id=doc["session_id"], call_id=doc["call_id"],
        name=doc["name"], success=doc["success"],
        content=tuple((p["kind"], bytes(p["digest"])) for p in doc["content"]),
        native_session_id=doc.get("native_session_id"), thread_id=doc.get("thread_id"),
        turn_id=doc.get("turn_id"),
        joined=bytes(doc["joined"]) if doc.get("joined") is not None else None,
    )


class Store(Protocol):
    """What the tracker needs of its store (``ReceiptRepository``; in memory in unit tests)."""

    async def pending(self) -> list[Doc]: ...
    async def open_pending(self, docs: list[Doc]) -> dict[str, float]: ...
    async def settle(self, ids: list[str]) -> None: ...
    async def claim(self, docs: list[Doc]) -> set[int]: ...
    async def claims(self, ids: list[str]) -> dict[str, Doc]: ...
    async def early(self) -> list[Doc]: ...
    async def keep_early(self, docs: list[Doc]) -> None: ...
    async def sweep_early(self, before: float) -> None: ...
    async def learn_calls(self, docs: list[Doc]) -> None: ...
    async def calls(self, ids: list[str]) -> dict[str, Doc]: ...


class ReceiptRepository:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.db = db

    async def ensure_indexes(self) -> None:
        """Every query here is an ``_id`` equality or a whole-collection read, so the tracker
        declares no index of its own: a secondary index would only cost each insert and delete
        (on FerretDB v1, a b-tree write per index, and it serves no query there either).
        Indexes older versions declared are dropped."""
        await drop_indexes(self.db.pending_receipts, UNUSED_INDEXES)

    # ---- pending calls --------------------------------------------------------------------
    async def pending(self) -> list[Doc]:
        return [d async for d in self.db.pending_receipts.find({})]

    async def open_pending(self, docs: list[Doc]) -> dict[str, float]:
        """Insert the pending records; for those already stored (a replica or an earlier run
        opened the call) return the stored deadline, which is the one kept."""
        try:
            await self.db.pending_receipts.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            dup = [docs[i]["_id"] for i in _duplicates(exc)]
            found = await find_by_ids(self.db.pending_receipts, dup)
            return {k: float(d["deadline"]) for k, d in found.items()}
        return {}

    async def settle(self, ids: list[str]) -> None:
        """Forget decided calls: one round trip per collection (``delete_by_ids``: an ``$in``
        where the store serves it from its index, else ``_id`` equality deletes — an ``$in``
        would scan the collection on upstream FerretDB v1, holding the store's write lock)."""
        for coll in (self.db.pending_receipts, self.db.receipt_calls):
            with contextlib.suppress(BulkWriteError):  # already gone: nothing to do
                await delete_by_ids(coll, ids)

    # ---- verdict claims -------------------------------------------------------------------
    async def claim(self, docs: list[Doc]) -> set[int]:
        """Claim verdicts; the indexes of the ones someone else claimed first."""
        try:
            await self.db.receipt_verdicts.insert_many(docs, ordered=False)
        except BulkWriteError as exc:
            return set(_duplicates(exc))
        return set()

    async def claims(self, ids: list[str]) -> dict[str, Doc]:
        return await find_by_ids(self.db.receipt_verdicts, ids)

    # ---- observations read before their call's delivery ------------------------------------
    async def early(self) -> list[Doc]:
        return [d async for d in self.db.early_observations.find({})]

    async def keep_early(self, docs: list[Doc]) -> None:
        with contextlib.suppress(BulkWriteError):  # a redelivered batch: already there
            await self.db.early_observations.insert_many(docs, ordered=False)

    async def sweep_early(self, before: float) -> None:
        await self.db.early_observations.delete_many({"at": {"$lt": before}})

    # ---- calls as the harness announced them ------------------------------------------------
    async def learn_calls(self, docs: list[Doc]) -> None:
        with contextlib.suppress(BulkWriteError):  # announced before (a redelivery): the same
            await self.db.receipt_calls.insert_many(docs, ordered=False)

    async def calls(self, ids: list[str]) -> dict[str, Doc]:
        return await find_by_ids(self.db.receipt_calls, ids)


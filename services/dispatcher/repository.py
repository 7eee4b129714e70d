"""The dispatcher's MongoDB adapter. It owns three collections (``shared/ownership.py``):

* ``bindings`` — one per Session: its Runtime (or none), whether its input needs message
  images, the Turn it carries (a gone Runtime fails that Turn);
* ``pending_deliveries`` — input waiting for an eligible Runtime, in arrival order (``n``),
  with the trace it came in (``trace``, tracing on);
* ``leases`` — which replica runs the sweeper.

A binding changes Runtime only by compare-and-set on the Runtime it was read with: replicas
(the sweeper's and a partition owner, or a partition's old and new owner) may decide for one
Session at the same moment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import ASCENDING
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError

from shared.store import Doc
from shared.storekeys import pending_key


class DispatcherRepository:
    def __init__(self, db: AsyncDatabase[Doc]) -> None:
        self.db = db

    async def ensure_indexes(self) -> None:
        await self.db.pending_deliveries.create_index(
            [("session_id", ASCENDING), ("n", ASCENDING)], name="pending_session_n")
        await self.db.bindings.create_index([("runtime_id", ASCENDING)], name="bindings_runtime")

    # ---- bindings ---------------------------------------------------------------------
    async def binding(self, session_id: str) -> Doc | None:
        return await self.db.bindings.find_one({"_id": session_id})

    async def create_binding(self, doc: Doc) -> Doc:
        """The Session's binding: ``doc`` if it had none, else the one already there."""
        await self.db.bindings.update_one({"_id": doc["_id"]}, {"$setOnInsert": doc},
                                          upsert=True)
        return await self.binding(doc["_id"]) or doc

    async def update_binding(self, session_id: str, fields: Mapping[str, Any]) -> None:
        await self.db.bindings.update_one({"_id": session_id}, {"$set": dict(fields)})

    async def swap_runtime(self, session_id: str, read: str | None,
                           fields: Mapping[str, Any]) -> bool:
        """Set ``fields`` only if the binding still names ``read`` (None: unbound)."""
        res = await self.db.bindings.update_one({"_id": session_id, "runtime_id": read},
                                                {"$set": dict(fields)})
        return res.matched_count == 1

    async def bound_to(self, runtime_id: str) -> list[Doc]:
        return [b async for b in self.db.bindings.find({"runtime_id": runtime_id})]

    async def load(self) -> dict[str, int]:
        load: dict[str, int] = {}
        async for b in self.db.bindings.find({"runtime_id": {"$ne": None}}, {"runtime_id": 1}):
            load[b["runtime_id"]] = load.get(b["runtime_id"], 0) + 1
        return load

    # ---- input waiting for a Runtime --------------------------------------------------
    async def pending_count(self, session_id: str) -> int:
        return await self.db.pending_deliveries.count_documents({"session_id": session_id})

    async def queue(self, session_id: str, event_id: str, record: Doc, n: int,
                    queued_at: float, trace: Mapping[str, str] | None = None) -> None:
        """Idempotent: a redelivered record keeps its first place (``n``), wait clock and
        ``trace`` (the W3C context it came in, tracing on: its delivery's parent)."""
        doc: Doc = {"session_id": session_id, "n": n, "queued_at": queued_at, "record": record}
        if trace:
            doc["trace"] = dict(trace)
        await self.db.pending_deliveries.update_one(
            {"_id": pending_key(session_id, event_id)}, {"$setOnInsert": doc}, upsert=True)

    async def pending(self, session_id: str) -> list[Doc]:
        return [p async for p in
                self.db.pending_deliveries.find({"session_id": session_id}).sort("n", 1)]

    async def unqueue(self, pending_id: str) -> None:
        await self.db.pending_deliveries.delete_one({"_id": pending_id})

    async def waiting_sessions(self) -> set[str]:
        return {p["session_id"] async for p in
                self.db.pending_deliveries.find({}, {"session_id": 1})}

    # ---- the sweeper's lease ----------------------------------------------------------
    async def hold_lease(self, name: str, holder: str, now: float, ttl: float) -> bool:
        try:
            res = await self.db.leases.update_one(
                {"_id": name, "$or": [{"holder": holder}, {"expires": {"$lt": now}}]},
                {"$set": {"holder": holder, "expires": now + ttl}}, upsert=True)
        except DuplicateKeyError:  # the upsert met the lease another replica holds
            return False
        return res.matched_count + (1 if res.upserted_id is not None else 0) > 0

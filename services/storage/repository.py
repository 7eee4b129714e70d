"""Storage's MongoDB adapter: journal, Items, Sessions, calls, idempotency, image chunks.
A call's verdict is its journal entry (``storekeys.verdict_fact_id``), nothing besides.
All writes are idempotent (unique ``_id`` / unique indexes), so replaying a journal entry after
a crash is harmless; Session documents only move forward (version guard)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

from pymongo import UpdateOne
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import BulkWriteError

from services.storage.domain.sessions import Decision, SessionState
from services.storage.sessionwriter import SessionWriter
from shared import image_store as images
from shared import itemstore
from shared.store import Doc, find_by_ids
from shared.storecodec import dumps, item_doc, pack, unpack
from shared.storekeys import item_key, item_source, journal_key_of, skipped_source, state_step

DUPLICATE_KEY = 11000
# Session updates per ``update`` command. FerretDB v1.24 keeps every statement's query cursor of
# one ``update`` command open until the command ends (msg_update.go: ``defer closer.Close()``
# in the loop), each holding one of the 100 connections of the database's SQLite pool: a
# command of 100 or more statements waits forever for a 101st connection (seen: 100 upserts
# never answered). So the bulk write goes in commands of at most this many statements.
SESSIONS_PER_UPDATE = 32


def _only_duplicates(exc: BulkWriteError) -> bool:
    errors = exc.details.get("writeErrors", [])
    return all(e.get("code") == DUPLICATE_KEY for e in errors)


async def insert_ignoring_duplicates(coll: Any, docs: list[Doc]) -> None:
    if not docs:
        return
    try:
        await coll.insert_many(docs, ordered=False)
    except BulkWriteError as exc:
        if not _only_duplicates(exc):
            raise


async def insert_in_order(coll: Any, docs: list[Doc]) -> list[Doc]:
    """Insert in list order — a crash or an outage leaves a prefix, never a hole (unordered
    inserts may be applied in any order, and ``roll_forward`` reads a Session's Items from
    its last sequence on). Returns the documents whose ``_id`` was already taken."""
    taken: list[Doc] = []
    rest = docs
    while rest:
        try:
            await coll.insert_many(rest, ordered=True)
            return taken
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if not errors or not _only_duplicates(exc):
                raise
            first = min(e["index"] for e in errors)
            taken.append(rest[first])
            rest = rest[first + 1:]
    return taken


GENESIS = "genesis"  # in ``handovers``: the store was empty when the marks began


class StaleDecision(RuntimeError):
    """A fresh decision met the store already holding another decision at its place: the
    Session state it was decided from was stale. Nothing of it may be published; the batch is
    decided again from the store."""


class StorageRepository:
    def __init__(self, db: AsyncDatabase[Doc], inline_image_max: int, chunk_bytes: int) -> None:
        self.db = db
        self.inline_max = inline_image_max
        self.chunk_bytes = chunk_bytes
        # This replica's writes take turns, first come first served: one write command of it
        # in the store at a time. SQLite (FerretDB's embedded backend) admits one writer; the
        # others poll with sleeps of up to 100 ms (SQLite's default busy handler), so a batch's
        # commit behind the Session writer's updates lost whole sleep quanta, and a run of small
        # update transactions could keep winning the lock from it (docs/storage.md, "Writes
        # take turns"). A batch's commit takes one turn, the Session writer one per command.
        self.turn = asyncio.Lock()
        # every Session document write goes through it (services/storage/sessionwriter.py)
        self.session_writer = SessionWriter(self._advance_sessions)

    # ---- reads -------------------------------------------------------------------
    async def sessions(self, ids: Iterable[str]) -> dict[str, SessionState]:
        """The Sessions' states as the store holds them, or newer: a state decided but not
        written yet (``SessionWriter``). May still lag behind the journal (``roll_forward``)."""
        wanted = list(ids)
        found = await find_by_ids(self.db.sessions, wanted)
        out = {k: SessionState.from_doc(unpack(d) or d) for k, d in found.items()}
        for sid in wanted:
            unwritten = self.session_writer.state(sid)
            if unwritten is not None and (sid not in out
                                          or unwritten.version > out[sid].version):
                out[sid] = unwritten
        return out

    async def journal(self, keys: Iterable[str]) -> dict[str, Doc]:
        found = await find_by_ids(self.db.journal, list(keys))
        return {k: json.loads(d["payload"]) for k, d in found.items()}

    async def idempotency(self, keys: Iterable[str]) -> dict[str, Doc]:
        found = await find_by_ids(self.db.idempotency, list(keys))
        return {k: unpack(d) or d for k, d in found.items()}

    async def calls(self, keys: Iterable[str]) -> dict[str, Doc]:
        found = await find_by_ids(self.db.calls, list(keys))
        return {k: unpack(d) or d for k, d in found.items()}

    # ---- the journal: one atomic document per decided record ----------------------
    def journal_doc(self, d: Decision) -> tuple[Doc, list[Doc]]:
        stored_items, chunks = [], []
        for it in d.items:
            ext, ch = images.externalize(it, self.inline_max, self.chunk_bytes)
            stored_items.append(ext)
            chunks.extend(ch)
        # a held agent message's long text: in chunks, not in the state (shared/image_store.py)
        state, ch = images.externalize_state(d.state.to_doc() if d.state else None,
                                             self.inline_max, self.chunk_bytes)
        chunks.extend(ch)
        stored = None
        if d.to_deliver is not None:
            stored = dict(d.to_deliver)
        doc: Doc = {
            "_id": d.source_key,
            "session_id": d.session_id,
            "state": state,
            "items": stored_items,
            "reply": _strip_items(d.reply),
            "stored": _strip_stored(stored),
            "call_updates": d.call_updates,
            "idempotency": [_strip_idem(x) for x in d.idempotency],
            "applications": d.applications,
        }
        return doc, chunks

    def tombstone(self, source_key: str, session_id: str) -> Doc:
        """The journal entry of a record that decided nothing (``storekeys.skipped_source``):
        an empty decision's entry under its own key."""
        doc, _ = self.journal_doc(Decision(source_key=source_key, session_id=session_id))
        return {**doc, "_id": skipped_source(source_key), "tombstone": True}

    async def skipped(self, source_keys: dict[str, str]) -> None:
        """Tombstones of dead-lettered records (source key → session id)."""
        async with self.turn:
            await insert_ignoring_duplicates(self.db.journal, [
                _journal_row(self.tombstone(k, sid)) for k, sid in source_keys.items()])

    async def journaled(self, source_keys: Iterable[str]) -> set[str]:
        """Which of these records are in the journal, decided or as a tombstone."""
        keys = list(source_keys)
        found = await find_by_ids(self.db.journal, keys + [skipped_source(k) for k in keys])
        return {k for k in keys if k in found or skipped_source(k) in found}

    # ---- shards' handover marks (services/storage/decided.py) ---------------------
    async def mark_genesis(self) -> None:
        """A store that holds no Session, Item or journal entry yet has nothing behind: from
        now on a shard without a mark is clean (``GENESIS``). A store written before the marks
        existed gets none, and its shards are probed as before (docs/storage.md)."""
        if await self.db.handovers.find_one({"_id": GENESIS}) is not None:
            return
        for coll in (self.db.sessions, self.db.items, self.db.journal):
            if await coll.find_one({}, {"_id": 1}) is not None:
                return
        await insert_ignoring_duplicates(self.db.handovers, [{"_id": GENESIS}])

    async def take_marks(self, keys: dict[Any, str], holder: str) -> set[Any]:
        """Read the shards' marks and replace each with ``held`` by ``holder``, before anything
        of the shard is written; the shards whose mark said ``clean`` (or that have none, in a
        store marked from its genesis)."""
        found = await find_by_ids(self.db.handovers, [*keys.values(), GENESIS])
        async with self.turn:
            await self.db.handovers.bulk_write(
                [UpdateOne({"_id": k}, {"$set": {"state": "held", "holder": holder}}, upsert=True)
                 for k in keys.values()], ordered=False)
        unmarked = "clean" if GENESIS in found else None
        return {s for s, k in keys.items() if found.get(k, {"state": unmarked})["state"] == "clean"}

    async def release_marks(self, keys: Iterable[str], holder: str) -> None:
        """Mark the shards ``clean`` — each only while ``holder`` still holds it (a replica
        that stopped may release after another took the shard over). The filter is ``_id``
        plus the holder: on MongoDB an ``_id`` index look-up; on FerretDB v1 a scan of this
        collection, one document per shard."""
        for k in keys:
            async with self.turn:
                await self.db.handovers.update_one({"_id": k, "holder": holder},
                                                   {"$set": {"state": "clean"}})

    async def commit(self, journal_docs: list[Doc], chunks: list[Doc]) -> None:
        """Make decided records durable: chunks, Items, journal (the commit point). Items go
        before the journal so that a crash in between leaves Items without a journal entry —
        found and removed by ``roll_forward`` — never a journal entry that nothing points to.
        What follows (``apply_rest``: calls, idempotency, Sessions) is derived from
        the journal and may lag behind it: ``roll_forward`` and replays finish it."""
        async with self.turn:  # one turn for the whole commit point
            await insert_ignoring_duplicates(self.db.image_chunks, _dedupe(chunks))
            taken = await insert_in_order(self.db.items, _item_docs(journal_docs))
            if taken:
                await self._adopt(taken)
            taken = await insert_in_order(self.db.journal, [
                row for j in journal_docs for row in (*_step_rows(j), _journal_row(j))])
            taken = await self._own_steps(taken)
        # a tombstone may be there already: the record decided nothing before, either
        tombstones = {j["_id"] for j in journal_docs if j.get("tombstone")}
        taken = [d for d in taken if d["_id"] not in tombstones]
        if taken:
            raise StaleDecision(f"records decided before: {[d['_id'] for d in taken][:5]}")

    async def _own_steps(self, taken: list[Doc]) -> list[Doc]:
        """``taken`` without the state steps already written by an earlier attempt of the same
        decision (one that died before its journal entry); a step another record holds is
        taken (``StaleDecision``): the state decided from was stale."""
        steps = [d for d in taken if d.get("step_of")]
        if not steps:
            return taken
        held = await find_by_ids(self.db.journal, [d["_id"] for d in steps])
        mine = {d["_id"] for d in steps if held.get(d["_id"], {}).get("step_of") == d["step_of"]}
        return [d for d in taken if d["_id"] not in mine]

    async def _adopt(self, taken: list[Doc]) -> None:
        """Items already at this batch's places. Another decision's: the state decided from was
        stale (``StaleDecision``). This record's own, left by an attempt that died before its
        journal entry was written — nobody was answered and nothing published, but a Session
        whose document was trusted is not rolled forward, so they were not removed: they take
        this attempt's content (its ``created_at``), which the journal will hold and the
        Items published will be — unless the journal holds the record already (decided
        before: ``StaleDecision``, and its Items stay as they are)."""
        held = await find_by_ids(self.db.items, [d["_id"] for d in taken])
        other = [d["_id"] for d in taken
                 if held.get(d["_id"], {}).get("source_key") != d["source_key"]]
        if other:
            raise StaleDecision(f"Items already held by other decisions: {other[:5]}")
        differ = [d for d in taken if held[d["_id"]] != d]
        if not differ:
            return
        journaled = await find_by_ids(
            self.db.journal, list({journal_key_of(d["source_key"]) for d in differ}))
        if journaled:
            raise StaleDecision(f"records decided before: {sorted(journaled)[:5]}")
        for d in differ:
            await self.db.items.replace_one({"_id": d["_id"]}, d)

    async def apply(self, journal_docs: list[Doc], stored: dict[str, int] | None = None
                    ) -> None:
        """Apply journaled decisions again (idempotent): a replay, or a roll-forward.
        ``stored``: the version of each Session the store holds (read or written by this
        replica); a replayed state not newer than it is not written (a Session never moves
        back)."""
        await self._insert_items(journal_docs)
        await self.apply_rest(journal_docs, stored)

    async def _insert_items(self, journal_docs: list[Doc]) -> None:
        async with self.turn:
            await insert_ignoring_duplicates(self.db.items, _item_docs(journal_docs))

    async def roll_forward(self, states: dict[str, SessionState], session_ids: Iterable[str]
                           ) -> dict[str, SessionState]:
        """Bring Session states up to what the store really holds. A crash (``kill -9``, the
        store going away mid-write) can leave a decided record's Items and journal entry
        written but its Session document not advanced; the next record of that Session —
        possibly from another topic, so before the redelivery of the first — would then be
        decided at the same sequence, and its Items silently lost to the unique index. So,
        while not trusted, for each Session: if an Item exists just
        after its ``last_sequence``, finish that Item's journal entry and take its state;
        Items without a journal entry that holds them (the crash came between the two
        writes: nobody was answered, nothing published; or a record decided a second time,
        stopped by ``StaleDecision``) are removed so their sequences can be decided again."""
        out = dict(states)
        pending = list(dict.fromkeys(session_ids))
        while pending:
            nxt = {sid: (out[sid].last_sequence if sid in out else 0) + 1 for sid in pending}
            found = await find_by_ids(self.db.items, [item_key(s, q) for s, q in nxt.items()])
            heads = {sid: found[item_key(sid, q)] for sid, q in nxt.items()
                     if item_key(sid, q) in found}
            journal = await self.journal({journal_key_of(d["source_key"]) for d in heads.values()})
            pending = []
            for sid, doc in heads.items():
                j = journal.get(journal_key_of(doc["source_key"]))
                state = itemstore.state_after(j, sid, nxt[sid])
                if j is None or state is None:
                    await self._drop_orphans(sid, nxt[sid])
                    continue
                await self.apply([j])
                out[sid] = SessionState.from_doc(state)
                pending.append(sid)
            # no Item next: a decision may still have moved the Session on without one
            stepped = await self._steps({sid: out[sid] for sid in nxt
                                         if sid not in heads and sid in out})
            out.update(stepped)
            pending.extend(stepped)
        return out

    async def _steps(self, states: dict[str, SessionState]) -> dict[str, SessionState]:
        """The Sessions a journaled decision took one version past ``states`` without adding an
        Item (``state_step``): their state after it, its derived writes applied again. A step
        whose journal entry is missing (the crash came between the two) is removed: the
        record is decided again."""
        if not states:
            return {}
        keys = {state_step(sid, st.version + 1): sid for sid, st in states.items()}
        found = await find_by_ids(self.db.journal, list(keys))
        entries = await self.journal({d["step_of"] for d in found.values()})
        out: dict[str, SessionState] = {}
        for key, doc in found.items():
            sid = keys[key]
            j = entries.get(doc["step_of"])
            state = j.get("state") if j is not None else None
            if j is None or not isinstance(state, dict) \
                    or state.get("version") != states[sid].version + 1:
                async with self.turn:
                    await self.db.journal.delete_one({"_id": key})
                continue
            await self.apply([j])
            out[sid] = SessionState.from_doc(state)
        return out

    async def _drop_orphans(self, sid: str, first: int) -> None:
        seq = first
        while True:
            doc = await self.db.items.find_one({"_id": item_key(sid, seq)})
            if doc is None:
                return
            j = await self.journal([journal_key_of(doc["source_key"])])
            if any(itemstore.holds(p, sid, seq) for p in j.values()):
                return  # decided and journaled: not an orphan (cannot follow one; stop)
            async with self.turn:
                await self.db.items.delete_one({"_id": doc["_id"]})
            seq += 1

    async def apply_rest(self, journal_docs: list[Doc], stored: dict[str, int] | None = None,
                         *, defer: bool = False) -> None:
        """The writes derived from journaled decisions: calls, idempotency, Sessions.
        ``stored``: see ``apply``. ``defer``: the Session documents that may lag behind the
        journal are left to the ``SessionWriter`` (services/storage/sessionwriter.py); those
        that may not — a Session created here, a change without an Item — are written now."""
        call_ops: list[UpdateOne] = []
        idem: list[Doc] = []
        latest: dict[str, Doc] = {}
        urgent: set[str] = set()
        for j in journal_docs:
            for cu in j["call_updates"]:
                upd: Doc = {}
                if "set" in cu:
                    upd["$set"] = pack(cu["set"])
                if "set_on_insert" in cu:
                    upd["$setOnInsert"] = pack(cu["set_on_insert"])
                call_ops.append(UpdateOne({"_id": cu["_id"]}, upd, upsert=True))
            idem.extend(pack(x) for x in j["idempotency"])
            if j["state"] is not None:
                latest[j["session_id"]] = j["state"]
                if not j["items"] or j["state"]["version"] == 1:
                    urgent.add(j["session_id"])
        # in commands of SESSIONS_PER_UPDATE statements, as the Sessions (FerretDB's pool)
        async with self.turn:
            for i in range(0, len(call_ops), SESSIONS_PER_UPDATE):
                await self.db.calls.bulk_write(call_ops[i:i + SESSIONS_PER_UPDATE], ordered=True)
            await insert_ignoring_duplicates(self.db.idempotency, idem)
        newer = {sid: st for sid, st in latest.items()
                 if stored is None or st["version"] > stored.get(sid, -1)}
        if defer:
            await self.session_writer.write_now(
                {sid: st for sid, st in newer.items() if sid in urgent})
            self.session_writer.defer({sid: st for sid, st in newer.items() if sid not in urgent})
        else:
            await self.session_writer.write_now(newer)

    async def _advance_sessions(self, states: dict[str, Doc]) -> None:
        """Every Session of the batch in one unordered bulk write (per ``SESSIONS_PER_UPDATE``
        Sessions), each filtered by ``_id`` alone: FerretDB v1 serves only a lone ``_id``
        equality from an index (a filter with a version guard scanned the whole sessions
        collection once per Session). The guard is
        where the versions are known: the caller writes only states newer than the store's
        (fresh decisions are decided from it; replays pass ``stored``), and this replica is the
        one writer of its Sessions. A writer that lost its partition and still writes is
        stopped at the Items' unique index (``StaleDecision``) before it gets here; if its
        Session write is delayed past the new owner's, the document lags behind its Items and
        ``roll_forward`` brings it up when the Session is next read untrusted."""
        ops = [UpdateOne({"_id": sid}, {"$set": pack({k: v for k, v in st.items() if k != "_id"})},
                         upsert=True) for sid, st in states.items()]
        for i in range(0, len(ops), SESSIONS_PER_UPDATE):
            async with self.turn:  # per command: a batch's commit waits for one at most
                await self.db.sessions.bulk_write(ops[i:i + SESSIONS_PER_UPDATE], ordered=False)

    # ---- image rehydration for published / read Items ------------------------------
    async def rehydrate(self, items: list[Doc]) -> list[Doc]:
        return await itemstore.rehydrate(self.db, items)

    async def whole(self, items: list[Doc]) -> list[Doc]:
        return await itemstore.whole(self.db, items)


def _journal_row(j: Doc) -> Doc:
    return {"_id": j["_id"], "session_id": j["session_id"], "payload": dumps(j)}


def _step_rows(j: Doc) -> list[Doc]:
    """A decision that moved its Session on without an Item: its ``state_step``, written just
    before its journal entry (``roll_forward`` finds the step, then the entry)."""
    state = j.get("state")
    if j.get("tombstone") or j["items"] or not isinstance(state, dict):
        return []
    return [{"_id": state_step(j["session_id"], state["version"]),
             "session_id": j["session_id"], "step_of": j["_id"]}]


def _item_docs(journal_docs: list[Doc]) -> list[Doc]:
    return [item_doc(it, item_source(j["_id"], it["sequence"]))
            for j in journal_docs for it in j["items"]]


def _dedupe(docs: list[Doc]) -> list[Doc]:
    seen: dict[str, Doc] = {}
    for d in docs:
        seen.setdefault(d["_id"], d)
    return list(seen.values())


def _strip_items(reply: Doc | None) -> Doc | None:
    """Replies are rebuilt from the journal's Items on replay; keep them small."""
    if reply is None:
        return None
    body = {k: v for k, v in reply["body"].items() if k != "items"}
    return {**reply, "body": body}


def _strip_stored(stored: Doc | None) -> Doc | None:
    if stored is None:
        return None
    return {k: v for k, v in stored.items() if k not in ("messages", "submission")}


def _strip_idem(doc: Doc) -> Doc:
    body = {k: v for k, v in doc["body"].items() if k != "items"}
    item_keys = [item_key(it["session_id"], it["sequence"]) for it in doc["body"].get("items", [])]
    return {**doc, "body": body, "item_keys": item_keys}

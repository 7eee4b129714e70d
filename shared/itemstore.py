"""Reading stored Items back, for every service that does: by primary key only (an Item's
``_id`` is ``<session_id>/<sequence>``, a chunk's ``<sha256>:<n>``), with the exact original
image URIs and long agent texts put back (``shared/image_store.py``)."""

from __future__ import annotations

import copy
import json
from typing import Any

from shared import image_store
from shared.store import Doc, find_by_ids
from shared.storecodec import item_from_doc, pack
from shared.storekeys import (
    call_key,
    chunk_key,
    fact_source,
    item_key,
    journal_key_of,
    verdict_fact_id,
)


async def rehydrate(db: Any, items: list[Doc]) -> list[Doc]:
    refs = {r["sha256"]: r for it in items for r in image_store.refs(it)}
    if not refs:
        return items
    keys = [chunk_key(sha, n) for sha, r in refs.items() for n in range(r["chunks"])]
    found = await find_by_ids(db.image_chunks, keys)
    joined = {
        sha: b"".join(bytes(found[chunk_key(sha, n)]["data"]) for n in range(r["chunks"]))
        for sha, r in refs.items()
    }
    return [image_store.rehydrate(it, joined) for it in items]


async def whole(db: Any, items: list[Doc]) -> list[Doc]:
    """``items`` as they are published: an Item decided from a stored reference (a held agent
    message's text read back from the store as ``{"text_ref": …}``) gets its text back, in a
    copy. Without any reference (nearly always) the list itself is returned."""
    if not any(image_store.refs(it) for it in items):
        return items
    return [(await rehydrate(db, [copy.deepcopy(it)]))[0] if image_store.refs(it) else it
            for it in items]


async def items_by_keys(db: Any, keys: list[str]) -> list[Doc]:
    found = await find_by_ids(db.items, keys)
    items = sorted((item_from_doc(d) for d in found.values()), key=lambda i: i["sequence"])
    return await rehydrate(db, items)


async def page(db: Any, session_id: str, after: int, limit: int, last: int) -> list[Doc]:
    """Items ``after+1 … min(after+limit, last)`` of a Session; ``last`` is the Session
    document's ``last_sequence`` (Items beyond it are not yet committed to the Session)."""
    hi = min(after + limit, last)
    return await items_by_keys(db, [item_key(session_id, n) for n in range(after + 1, hi + 1)])


def holds(entry: Doc, session_id: str, sequence: int) -> bool:
    """Whether a journal entry (its payload) decided the Session's Item at ``sequence``: an Item
    whose entry does not is an orphan of a crash between the two writes (or of a record decided
    twice) — never part of the Session."""
    return any(it.get("session_id") == session_id and it.get("sequence") == sequence
               for it in entry.get("items", ()))


def state_after(entry: Doc | None, session_id: str, sequence: int) -> Doc | None:
    """The Session's state after its Item at ``sequence``, from the journal entry that decided
    it; ``None`` when the entry is missing or does not hold that Item."""
    if entry is None or not holds(entry, session_id, sequence):
        return None
    state = entry.get("state")
    return state if isinstance(state, dict) else None


async def session_head(db: Any, doc: Doc | None) -> Doc | None:
    """A Session document brought up to what storage journaled after it. Storage writes a
    Session's document behind the Items it journals (services/storage/sessionwriter.py), so
    Items may stand past the document's ``last_sequence``; each one whose journal entry holds it
    comes with the Session's whole state after it (``state_after``). Take that state and look
    again, until the next sequence holds no such Item. Returns the document as stored (packed),
    ``None`` for ``None``. One look-up when the document is current. (Storage's own
    ``roll_forward`` follows the same Items, and also repairs what it finds.)"""
    if doc is None:
        return None
    sid = doc["_id"]
    while True:
        nxt = int(doc.get("last_sequence", 0)) + 1
        item = await db.items.find_one({"_id": item_key(sid, nxt)}, {"source_key": 1})
        if item is None or not isinstance(item.get("source_key"), str):
            return doc
        entry = await db.journal.find_one({"_id": journal_key_of(item["source_key"])})
        state = state_after(json.loads(entry["payload"]) if entry else None, sid, nxt)
        if state is None:
            return doc
        doc = {**pack({k: v for k, v in state.items() if k != "_id"}), "_id": sid}


async def verdict(db: Any, session_id: str, call_id: str) -> Doc | None:
    """A call's verdict (``state``, ``reason``, ``at``) as storage journaled it, or ``None``
    before there is one: the journal entry of the call's verdict fact (one id per call,
    ``storekeys.verdict_fact_id``; a second verdict replays the first)."""
    entry = await db.journal.find_one({"_id": fact_source(verdict_fact_id(session_id, call_id))})
    if entry is None:
        return None
    key = call_key(session_id, call_id)
    for app in json.loads(entry["payload"]).get("applications") or ():
        if app.get("_id") == key:
            return {k: app.get(k) for k in ("state", "reason", "at")}
    return None

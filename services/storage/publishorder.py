"""First publications on ``session.items`` in ``sequence`` order, after a crash too.

CONTRACT: ``session.items`` carries each Session's Items in ``sequence`` order; an Item may be
published again after a crash (same ``id``), but the first publications must come 1, 2, 3…
A crash (``kill -9``) or a failed batch can leave Items journaled and never acked. Their
records come back from the committed offsets, replayed — but a Session's records are spread
over three topics (admitted input, core facts, observations), and the fetches interleave them
differently the second time: the record that decided Item 13 may come back before the one that
decided Item 12, and a fresh decision (Item 14) may be taken before either (seen in the chaos
suite's ``kill -9 storage`` row: ``[…, 11, 13, 12, 14, …]``).

So before a batch hands a Session's Items over, every earlier Item of it that may never have
been acked is handed over first (again, perhaps: same ``id``), and the batch's own Items of a
Session go in ``sequence`` order, with any Item between two of them that the batch does not
hold handed over in its place (``_gaps``: a fetch may return a partition in part).

An earlier Item may be unacked only if the record that decided it is at or past its partition's
committed offset: storage commits a batch's offsets only after every record it published was
acked, and batches are published one after another, so an Item decided by a committed record
was acked, and so was every Item before it. Each journal entry holds its record's position
(topic, partition, offset) for this walk; the walk goes down from the batch's first Item of the
Session and stops at the first Item decided by a committed record (or without a position:
written before positions were), or at the last Item this replica itself saw acked.

No walk where nothing can be missing: a Session's first Item; a Session whose Items up to the
batch's were acked through this replica; a Session whose shard was handed over clean and that
no failed batch of this replica wrote since without its Items acked after
(``DecidedState.publishes_in_order``: the previous owner committed after its acks)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from cachetools import FIFOCache

from shared.store import find_by_ids
from shared.storecodec import item_from_doc
from shared.storekeys import item_key, journal_key_of

Doc = dict[str, Any]
# (topic, partition) → the group's committed offset there (None: nothing committed)
Committed = Callable[[str, int], Awaitable[int | None]]
STEP = 16  # Items looked up per round of the walk, per Session (the first round: one)


class PublishOrder:
    def __init__(self, repo: Any, remembered: int = 100_000) -> None:
        self.repo = repo  # StorageRepository
        # session id → the highest sequence this replica saw acked on session.items
        self.acked: FIFOCache[str, int] = FIFOCache(remembered)

    async def complete(self, items: list[Doc], trusted: Iterable[str],
                       committed: Committed | None) -> list[Doc]:
        """``items`` (a batch's, in the order decided) as they are to be published: per Session,
        the earlier Items that may be unacked first, then the batch's own, in sequence order.
        ``trusted``: Sessions needing no walk (their shard handed over clean). ``committed``:
        None where there are no offsets (records handed in directly): no walk."""
        by_sid = by_session(items)
        skip = set(trusted)
        walk = {}
        for sid, its in by_sid.items():
            first = int(its[0]["sequence"])
            if first > 1 and sid not in skip and self.acked.get(sid, 0) < first - 1:
                walk[sid] = first
        earlier: dict[str, list[Doc]] = {}
        if walk and committed is not None:
            earlier = await self._walk(walk, committed)
        between = await self._gaps(by_sid)
        out: list[Doc] = []
        for sid, its in by_sid.items():
            before = earlier.get(sid, [])
            if before:
                out.extend(await self.repo.rehydrate(before))
            if sid in between:
                its = sorted(its + between[sid], key=lambda it: int(it["sequence"]))
            out.extend(its)
        return out

    async def _gaps(self, by_sid: dict[str, list[Doc]]) -> dict[str, list[Doc]]:
        """Per Session, the Items between the batch's own that the batch does not hold: a
        fetch may return a partition in part, so a batch can replay Items 1 and 2 and decide 4
        from another topic while the record that decided 3 — journaled by a failed batch, never
        acked — is still to come. Handed over in their place (again, perhaps)."""
        keys = [item_key(sid, n) for sid, its in by_sid.items()
                for n in sorted(set(range(int(its[0]["sequence"]), int(its[-1]["sequence"])))
                                - {int(it["sequence"]) for it in its})]
        if not keys:
            return {}
        docs = await find_by_ids(self.repo.db.items, keys)
        found = await self.repo.rehydrate([item_from_doc(docs[k]) for k in keys if k in docs])
        between: dict[str, list[Doc]] = {}
        for it in found:
            between.setdefault(it["session_id"], []).append(it)
        return between

    def saw_acked(self, items: Iterable[Doc]) -> None:
        for it in items:
            sid, seq = it["session_id"], int(it["sequence"])
            if self.acked.get(sid, 0) < seq:
                self.acked[sid] = seq

    async def _walk(self, firsts: dict[str, int], committed: Committed) -> dict[str, list[Doc]]:
        """Per Session, its Items below ``firsts[sid]`` that may be unacked, in sequence order."""
        found: dict[str, list[Doc]] = {sid: [] for sid in firsts}
        below = dict(firsts)  # the next Item to look at is below this, per Session
        offsets: dict[tuple[str, int], int | None] = {}
        step = 1  # mostly the Item just below is a committed record's: one look-up
        while below:
            ranges = {sid: range(hi - 1, max(self.acked.get(sid, 0), hi - 1 - step), -1)
                      for sid, hi in below.items()}
            step = STEP
            keys = [item_key(sid, n) for sid, r in ranges.items() for n in r]
            docs = await find_by_ids(self.repo.db.items, keys)
            entries = await self.repo.journal(sorted({journal_key_of(d["source_key"])
                                                      for d in docs.values()}))
            nxt = {}
            for sid, r in ranges.items():
                done = False
                for n in r:
                    doc = docs.get(item_key(sid, n))
                    entry = entries.get(journal_key_of(doc["source_key"])) if doc else None
                    pos = entry.get("position") if entry else None
                    if pos is None:  # gone, orphaned, or journaled before positions: acked
                        done = True
                        break
                    topic, partition, offset = pos
                    if (topic, partition) not in offsets:
                        offsets[(topic, partition)] = await committed(topic, partition)
                    c = offsets[(topic, partition)]
                    if c is not None and offset < c:
                        done = True  # a committed record's Item: acked, and all before it
                        break
                    assert doc is not None
                    found[sid].append(item_from_doc(doc))
                if not done and len(r) and r[-1] > self.acked.get(sid, 0) + 1:
                    nxt[sid] = r[-1]
            below = nxt
        return {sid: its[::-1] for sid, its in found.items() if its}


def by_session(items: list[Doc]) -> dict[str, list[Doc]]:
    """The batch's Items by Session, each Session's in sequence order, once each."""
    by_sid: dict[str, dict[int, Doc]] = {}
    for it in items:
        by_sid.setdefault(it["session_id"], {}).setdefault(int(it["sequence"]), it)
    return {sid: [seqs[n] for n in sorted(seqs)] for sid, seqs in by_sid.items()}

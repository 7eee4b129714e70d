"""Session documents written behind the batch.

A Session document is derived from the journal: every journaled decision holds the Session's
whole state after it. On FerretDB v1 each Session update is one statement of ~0.5 ms, the
batch's dearest part by far (an ``insert_many`` of hundreds of Items or journal entries is one
statement), so the batch does not wait for them. It hands the states here; one writer task
writes the latest state of each dirty Session, as many per command as ``SESSIONS_PER_UPDATE``,
while the next batches are decided (a Session decided again before its write went out is
written once, in its newest state).

What stays true (docs/storage.md, "Session documents behind the journal"):
- **A Session document never moves back.** One writer (this object, under its lock) writes a
  Session; it writes the newest state it holds, and a state it was handed is dropped once a
  newer one is written.
- **What is written now.** A Session created in the batch (its document must exist when its
  creator is answered: ``GET`` reads it) and a decision that changes the state without an Item
  (a binding): readers and ``roll_forward`` find every other change from its Items, a binding
  they would not. ``write_now`` awaits those before the batch answers anyone.
- **A crash loses nothing.** Offsets are committed before a deferred write may have gone out;
  after ``kill -9`` the document lags behind its Items, and the lag is what ``roll_forward``
  (storage, before it decides a Session it does not hold in memory) and
  ``shared.itemstore.session_head`` (every reader) already bring up from the journal.
- **The replica's own reads** take the state from here first (``state``): a Session whose
  newest state is not written yet is not read back stale from the store.
- **Partitions move**: the rebalance listener drains the writer before it gives its
  partitions up, so the new owner reads current documents (or, the store away, drops what is
  left; the new owner rolls those Sessions forward).
- **Paced**: while Sessions keep falling dirty, the writer rests ``PACE`` times as long as its
  last round took before the next, so it takes at most 1 / (1 + ``PACE``) of the store's time
  and the batch path (Items, journal — what answers wait for) gets the rest; a Session decided
  again meanwhile is written once, in its newest state. A drain (partitions moving, stopping)
  does not rest. (Each upsert costs FerretDB v1 ~0.45 ms, an inserted Item ~0.05 ms: unpaced,
  the writer re-wrote every Session as fast as it fell dirty and took the store's write lock
  from the batches; docs/decisions.md, "The Session writer is paced, …".)
- **Held back while storage is behind**: a Session is written as soon as it falls dirty, except
  while storage takes batches of ``BEHIND_BATCH`` records or more (its input came faster than
  it decided it: a burst of verdicts, a backlog after a restart) and for ``HOLD_S`` after the
  last one. Then a Session is written only when due: its document ``LAG_ITEMS`` Items behind
  (about: counted from the first state handed since its last write), ``LAG_S`` after it fell
  dirty, or more than ``DIRTY_MAX`` Sessions waiting (the oldest first); a drain writes
  everything at once. Until then each decision of it replaces the state to write, so a Session
  decided many times in a burst is written once, after it. What a reader pays for a document
  behind is bounded by ``LAG_ITEMS``: ``session_head`` and ``roll_forward`` follow at most that
  many Items. (Written as soon as dirty, at 2 000 decisions/s over 1 000 Sessions the writer's
  rounds took as much of the store's time as the batches' commits. Written only when due at
  every load, the writes of a steady stream of requests for Sessions not in memory moved to
  10 s later, into the requests of that moment: docs/storage.md, "Session documents behind the
  journal".)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from services.storage.domain.sessions import SessionState
from shared.logging import get_logger
from shared.metrics import STORAGE_SESSIONS_BEHIND
from shared.pacing import rest_after

log = get_logger(__name__)
Doc = dict[str, Any]
Write = Callable[[dict[str, Doc]], Awaitable[None]]
RETRY_S = 0.5  # after a failed write (the store away): the states stay, newer ones supersede
# Sessions written per round: one command of SESSIONS_PER_UPDATE statements. On FerretDB v1
# each statement is its own transaction, so a round holds SQLite's write lock for its length
# and the batch's commit waits behind it: ~16 ms, not the ~130-180 ms of 256 (docs/decisions.md,
# "The Session writer is paced, and held back only while storage is behind").
PER_ROUND = 32
PACE = 3.0  # rest after a round, as a multiple of the round's duration, while more is due
LAG_ITEMS = 16  # a Session this many Items behind its document is due
LAG_S = 10.0  # a Session dirty this long is due
DIRTY_MAX = 4_096  # more Sessions waiting than this: the oldest are due
# A batch of this many records or more: storage is behind its input (the writer holds back)
BEHIND_BATCH = 16
HOLD_S = 1.0  # held back for this long after the last such batch


class SessionWriter:
    def __init__(self, write: Write) -> None:
        self._write = write  # StorageRepository._advance_sessions (only this object calls it)
        self.dirty: dict[str, Doc] = {}  # session id → its newest state not written yet
        # session id → (loop time it fell dirty, the first unwritten state's last_sequence),
        # in the order they fell dirty (as ``dirty``)
        self._since: dict[str, tuple[float, int]] = {}
        self._behind: dict[str, None] = {}  # LAG_ITEMS or more Items behind, in that order
        self._lock = asyncio.Lock()  # one write at a time: a document never moves back
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._hurry = asyncio.Event()  # set while a drain waits: everything due, no rest
        self._draining = 0
        self._held_until = float("-inf")  # loop time: while before it, only what is due
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="storage-session-writer")

    async def stop(self, drain_s: float = 5.0) -> None:
        """Write what is left (for at most ``drain_s``), then stop."""
        with contextlib.suppress(TimeoutError):
            await self.drain(drain_s)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def state(self, session_id: str) -> SessionState | None:
        doc = self.dirty.get(session_id)
        return SessionState.from_doc(doc) if doc is not None else None

    def defer(self, states: dict[str, Doc]) -> None:
        """Newest states, to be written behind the batch (when due: module doc)."""
        now = asyncio.get_running_loop().time()
        # not held back: all is due; else the first dirty (the writer learns when it is due)
        due = not self._held(now) or not self._since
        for sid, st in states.items():
            held = self.dirty.get(sid)
            if held is not None and int(st["version"]) <= int(held["version"]):
                continue
            self.dirty[sid] = st
            seq = int(st.get("last_sequence", 0))
            first = self._since.setdefault(sid, (now, seq))[1]
            if seq - first + 1 >= LAG_ITEMS and sid not in self._behind:
                self._behind[sid] = None
                due = True
        if self.dirty:
            self._idle.clear()
            if due or len(self.dirty) > DIRTY_MAX:
                self._wake.set()
        STORAGE_SESSIONS_BEHIND.set(len(self.dirty))

    async def write_now(self, states: dict[str, Doc]) -> None:
        """Write these states before returning (after any write in flight)."""
        if not states:
            return
        async with self._lock:
            for sid, st in states.items():  # superseded: what is written now is newer
                held = self.dirty.get(sid)
                if held is not None and int(held["version"]) <= int(st["version"]):
                    self._written(sid)
            await self._write(states)
        STORAGE_SESSIONS_BEHIND.set(len(self.dirty))

    async def drain(self, timeout_s: float) -> None:
        """Until every state handed over so far is written (``TimeoutError`` after
        ``timeout_s``)."""
        if self._task is None:
            await self._round_until_clean()
            return
        self._draining += 1
        self._hurry.set()
        self._wake.set()
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        finally:
            self._draining -= 1
            if not self._draining:
                self._hurry.clear()

    def drop(self) -> None:
        """Forget the unwritten states (their documents lag; ``roll_forward`` brings them up)."""
        if self.dirty:
            log.warning("storage.session_writes_dropped", sessions=len(self.dirty))
        self.dirty.clear()
        self._since.clear()
        self._behind.clear()
        self._idle.set()
        STORAGE_SESSIONS_BEHIND.set(0)

    def took_batch(self, records: int) -> None:
        """Storage took a batch of ``records``: at ``BEHIND_BATCH`` or more it is behind its
        input, and the writer holds back (module doc) for ``HOLD_S``."""
        if records >= BEHIND_BATCH:
            self._held_until = asyncio.get_running_loop().time() + HOLD_S

    def _held(self, now: float) -> bool:
        return now < self._held_until

    def due(self, now: float) -> dict[str, Doc]:
        """The next round's Sessions (at most ``PER_ROUND``), oldest first: any, unless held
        back (or while draining, any); held back, those behind by ``LAG_ITEMS``, then those
        dirty for ``LAG_S`` and the oldest beyond ``DIRTY_MAX``."""
        if self._hurry.is_set() or not self._held(now):
            return dict(list(self.dirty.items())[:PER_ROUND])
        take = list(self._behind)[:PER_ROUND]
        excess = len(self._since) - DIRTY_MAX
        for n, (sid, (since, _)) in enumerate(self._since.items()):
            if len(take) >= PER_ROUND or (n >= excess and now - since < LAG_S):
                break
            if sid not in self._behind:
                take.append(sid)
        return {sid: self.dirty[sid] for sid in take}

    def _until_due(self, now: float) -> float | None:
        """Seconds until the oldest dirty Session is due by age or the hold ends, whichever
        comes first (``None``: nothing dirty)."""
        for since, _ in self._since.values():
            return max(0.0, min(since + LAG_S, self._held_until) - now)
        return None

    def _written(self, sid: str) -> None:
        self.dirty.pop(sid, None)
        self._since.pop(sid, None)
        self._behind.pop(sid, None)

    async def _round_until_clean(self) -> None:
        while self.dirty:
            await self._round(dict(list(self.dirty.items())[:PER_ROUND]))

    async def _round(self, take: dict[str, Doc]) -> None:
        async with self._lock:
            # chosen before the lock: a ``write_now`` that held it may have written a newer
            # state since (a document never moves back), or a newer one may wait to be written
            take = {sid: st for sid, st in take.items() if self.dirty.get(sid) is st}
            if not take:
                return
            try:
                await self._write(take)
            except Exception as exc:
                log.warning("storage.session_write_failed", error=repr(exc)[:300],
                            sessions=len(take))
                raise
            for sid, st in take.items():  # a newer state handed over meanwhile stays
                if self.dirty.get(sid) is st:
                    self._written(sid)
        STORAGE_SESSIONS_BEHIND.set(len(self.dirty))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            take = self.due(loop.time())
            if not take:
                if not self.dirty:
                    self._idle.set()
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self._until_due(loop.time()))
                continue
            began = loop.time()
            try:
                await self._round(take)
            except Exception:
                await asyncio.sleep(RETRY_S)
                continue
            if self.due(loop.time()):
                await rest_after(began, PACE, self._hurry)

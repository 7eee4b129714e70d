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
  from the batches; docs/benchmarks.md, "Session writer paced".)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from shared.domain.sessions import SessionState
from shared.logging import get_logger
from shared.metrics import STORAGE_SESSIONS_BEHIND
from shared.pacing import rest_after

log = get_logger(__name__)
Doc = dict[str, Any]
Write = Callable[[dict[str, Doc]], Awaitable[None]]
RETRY_S = 0.5  # after a failed write (the store away): the states stay, newer ones supersede
# Sessions written per round: one command of SESSIONS_PER_UPDATE statements. On FerretDB v1
# each statement is its own transaction, so a round holds SQLite's write lock for its length
# and the batch's commit waits behind it: ~16 ms, not the ~130-180 ms of 256 (docs/storage.md).
PER_ROUND = 32
PACE = 3.0  # rest after a round, as a multiple of the round's duration, while more is dirty


class SessionWriter:
    def __init__(self, write: Write) -> None:
        self._write = write  # StorageRepository._advance_sessions (only this object calls it)
        self.dirty: dict[str, Doc] = {}  # session id → its newest state not written yet
        self._lock = asyncio.Lock()  # one write at a time: a document never moves back
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._hurry = asyncio.Event()  # set while a drain waits: no rest between rounds
        self._draining = 0
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
        """Newest states, to be written behind the batch."""
        for sid, st in states.items():
            held = self.dirty.get(sid)
            if held is None or int(st["version"]) > int(held["version"]):
                self.dirty[sid] = st
        if self.dirty:
            self._idle.clear()
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
                    del self.dirty[sid]
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
        self._idle.set()
        STORAGE_SESSIONS_BEHIND.set(0)

    async def _round_until_clean(self) -> None:
        while self.dirty:
            await self._round()

    async def _round(self) -> None:
        async with self._lock:
            take = dict(list(self.dirty.items())[:PER_ROUND])
            try:
                await self._write(take)
            except Exception as exc:
                log.warning("storage.session_write_failed", error=repr(exc)[:300],
                            sessions=len(take))
                raise
            for sid, st in take.items():  # a newer state handed over meanwhile stays
                if self.dirty.get(sid) is st:
                    del self.dirty[sid]
        STORAGE_SESSIONS_BEHIND.set(len(self.dirty))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.dirty:
                began = loop.time()
                try:
                    await self._round()
                except Exception:
                    await asyncio.sleep(RETRY_S)
                    continue
                if self.dirty:
                    await rest_after(began, PACE, self._hurry)
            self._idle.set()

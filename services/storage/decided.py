"""What storage may take from its memory, and which records may already be decided.

While this replica owns its partitions and nothing failed, it is the only writer of their
Sessions: it keeps their states in memory and knows that no record of a batch was decided before,
except one it decided itself lately (the same record twice in the log). Everything else it must
learn from the store (the journal replays a decided record, the Session documents give the
states). Three things make memory untrustworthy, and each has its window:

- **assignment** (and start-up): the previous owner of a partition may have written past the
  committed offset without committing (``kill -9``, a commit lost in the rebalance, commits
  that failed while it went on fetching — FastStream logs a failed commit and goes on), so the
  records from the first one seen are checked against the journal, a batch (``batch_max``
  records) at a time. Every writer journals a partition's records in offset order (one ordered
  insert per batch; a record that decides nothing leaves a tombstone, a dead-lettered one too),
  so what a previous owner journaled past the committed offset is a prefix of the records from
  it: the first record (standing for any input) of each batch is looked up first
  (``probed``); not journaled, none after it was, and the window closes — one look-up per
  assignment in the common case; journaled, the batch's records are checked and the next
  batch's first record is probed in turn;
- **revocation**: another replica may write the Sessions from now on;
- **a failed batch**: it may have been decided and journaled in part. Its records come back —
  possibly split over several batches, interleaved differently across the three topics — after
  memory is trusted again (the first good batch makes it so), and each is checked whenever it
  comes (replayed, never decided again at another sequence).

Until a batch is decided from the store, nothing is trusted (every record is looked up, every
Session state read). An empty batch read nothing from the store: it proves nothing.

A Session this replica does not hold in memory is read from its document, which may lag behind
its Items (``SessionWriter``; a crash): the handler then looks for Items past it
(``roll_forward``) — unless the Session's shard (its partition number, the same in the three
topics) is **current**: its previous owner handed it over cleanly (its Session writer drained,
no failed batch, and it had itself inherited the shard current) and said so in the shard's
handover mark, and since then this replica has dropped no Session write — and the Session is
not **suspect**: a failed batch may have written Items of its Sessions without their
documents, so those Sessions are probed until a probe has brought them up (``repaired``).
A probe brings the document up, not the broker: the failed batch's Items may never have been
acked, so until a later batch's Items of the Session are acked (``acked``) its first
publications look for them (``publishes_in_order``, services/storage/publishorder.py), and a
shard holding such a Session is not handed over clean.
Before its first batch of a shard writes anything, a replica reads the mark and replaces it with
``held`` (``marks_to_take`` / ``marked``), so a replica that dies holding a shard leaves ``held``
behind and its successor probes; it writes ``clean`` back only on a clean handover of a shard
with no suspect left (``release``). A wrong "current" could only mean a decision at a sequence
the store already holds — the unique index refuses it (``StaleDecision``), the batch fails, its
Sessions turn suspect and it is decided again with them probed (docs/storage.md, "Clean
handovers").

One object, shared by the app (offsets, rebalances), the handler (look-ups, Session states) and
the rebalance listener, so the rules are read in one place and tested without a broker
(tests/unit/test_storage_decided.py)."""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Iterable

from cachetools import FIFOCache

from services.storage.domain.sessions import SessionState

Partition = Hashable  # aiokafka's TopicPartition; any hashable name in tests
Position = tuple[Partition, int]  # a record's partition and offset


Shard = Hashable  # the partition number (the name itself where a test names partitions)


def shard(tp: Partition) -> Shard:
    """The Sessions' shard of a partition: its number, the same in the three Session topics."""
    number = getattr(tp, "partition", None)
    return number if isinstance(number, int) else tp


class DecidedState:
    def __init__(self, batch_max: int, cache_size: int = 100_000) -> None:
        self.batch_max = batch_max
        self.trusted = False
        # the least recently written goes first: a write moves a key to the end, a read does not
        self.recent: FIFOCache[str, None] = FIFOCache(cache_size)  # source keys decided lately
        # Held pickled: a ``bytes`` is not tracked by the cyclic collector, a ``SessionState``
        # (and its ``__dict__``) is. A full collection walks every tracked object and stops
        # the event loop meanwhile, so 100 000 Sessions held as objects paused every request
        # in flight for ~60-180 ms every few seconds (docs/benchmarks.md, "Collector pauses").
        self.sessions: FIFOCache[str, bytes] = FIFOCache(cache_size)
        self.processed: dict[Partition, int] = {}  # next offset after written records
        self.fresh: set[Partition] = set()  # assigned; no record seen since
        self.assigned_until: dict[Partition, int] = {}  # an assignment's window (see above)
        self.unprobed: set[Partition] = set()  # an assignment window whose first record is
        # not looked up yet
        self.failed_until: dict[Partition, int] = {}  # a failed batch's records: look up always
        # shards (partition numbers): assigned, mark not read yet; marked held by this replica;
        # with current Session documents (see above)
        self.unmarked: set[Shard] = set()
        self.held: set[Shard] = set()
        self.current: set[Shard] = set()
        self.writing: dict[str, Shard] = {}  # the Sessions of the batch being written
        self.suspect: dict[str, Shard] = {}  # Sessions a failed batch may have left behind
        # Sessions a failed batch may have left with Items journaled and never acked: a probe
        # brings the document up to them, but not the broker (``publishes_in_order``)
        self.unacked: dict[str, Shard] = {}

    # ---- partitions ----------------------------------------------------------------
    def assigned(self, partitions: Iterable[Partition]) -> None:
        parts = set(partitions)
        self.fresh |= parts
        self.unmarked |= {shard(tp) for tp in parts} - self.held
        self.forget()

    def revoked(self, partitions: Iterable[Partition]) -> dict[Partition, int]:
        """The written offsets of the revoked partitions, to commit before they are given up
        (the new owner starts after them instead of deciding them again)."""
        done = {tp: self.processed.pop(tp) for tp in partitions if tp in self.processed}
        self.forget()
        return done

    def arrived(self, tp: Partition, offset: int) -> bool:
        """A record comes in a batch: true if another writer (the partition's previous owner, or
        a failed batch) may have decided it, so it is looked up even when memory is trusted."""
        if tp in self.fresh:  # the first record since the assignment: the committed one
            self.fresh.discard(tp)
            self.assigned_until[tp] = offset + self.batch_max
            self.unprobed.add(tp)
        return self.in_window(tp, offset)

    def in_window(self, tp: Partition, offset: int) -> bool:
        return (offset < self.assigned_until.get(tp, 0)
                or offset < self.failed_until.get(tp, 0))

    def probed(self, tp: Partition, journaled: bool, offset: int) -> None:
        """The first record (standing for any input) of a batch of ``tp`` in its assignment
        window was looked up: not journaled means nothing after it was either, and the window
        closes. Journaled, the previous owner got at least this far — and may have got further:
        a commit that fails is logged by the framework, not raised, so a writer can run several
        batches past the committed offset. The window then reaches a batch past this record,
        and the next batch's first record is probed again."""
        if not journaled:
            self.unprobed.discard(tp)
            self.assigned_until.pop(tp, None)
            return
        self.assigned_until[tp] = max(self.assigned_until.get(tp, 0), offset + self.batch_max)

    def batch_begins(self, sessions: dict[str, Shard]) -> None:
        """The Sessions (and their shards) the batch about to be written may write."""
        self.writing = dict(sessions)

    def batch_failed(self, positions: Iterable[Position]) -> None:
        self.attempt_failed()
        for tp, offset in positions:
            self.failed_until[tp] = max(self.failed_until.get(tp, 0), offset + 1)

    def batch_done(self, positions: Iterable[Position]) -> None:
        self.writing = {}
        for tp, offset in positions:
            self.processed[tp] = max(self.processed.get(tp, 0), offset + 1)

    def written(self, positions: Iterable[Position]) -> dict[Partition, int]:
        """The next offset after the written records of these positions' partitions (those
        still assigned: a revoked partition's are forgotten), to commit."""
        return {tp: self.processed[tp] for tp, _ in positions if tp in self.processed}

    def forget(self) -> None:
        """Trust only the store until a batch is decided from it."""
        self.sessions.clear()
        self.recent.clear()
        self.trusted = False

    def attempt_failed(self) -> None:
        """Writing the batch failed: it may have written Items of its Sessions without their
        documents. Forget, and probe those Sessions until a probe has brought them up."""
        self.forget()
        self.suspect.update(self.writing)
        self.unacked.update(self.writing)

    def writes_dropped(self) -> None:
        """Session documents this replica had to write will never be: no shard of it is
        current any more (until its next assignment)."""
        self.forget()
        self.current.clear()

    # ---- shards and their handover marks ---------------------------------------------
    def marks_to_take(self, partitions: Iterable[Partition]) -> set[Shard]:
        """The shards of a batch's partitions whose mark this replica has not read yet."""
        return {shard(tp) for tp in partitions} & self.unmarked

    def marked(self, shard_: Shard, inherited_clean: bool) -> None:
        """The shard's mark was read (``clean`` or not) and replaced by this replica's ``held``."""
        self.unmarked.discard(shard_)
        self.held.add(shard_)
        if inherited_clean:
            self.current.add(shard_)

    def trusts_document(self, session_id: str, tp: Partition) -> bool:
        """Whether the Session's document, read from the store, needs no look-up of Items past
        it."""
        return shard(tp) in self.current and session_id not in self.suspect

    def publishes_in_order(self, session_id: str, tp: Partition) -> bool:
        """Whether the Session's next Items may be first published without looking for earlier
        ones never acked (services/storage/publishorder.py): its document is current and no
        failed batch of this replica wrote Items of it that no later batch saw acked."""
        return self.trusts_document(session_id, tp) and session_id not in self.unacked

    def acked(self, heads: dict[str, int]) -> None:
        """A batch's Items were acked — per Session, the earlier ones never acked handed over
        first — up to ``heads[sid]``. A Session whose Items are acked up to its last decided
        one (as memory holds it) has none left unacked."""
        for sid, head in heads.items():
            if sid in self.unacked:
                state = self.session(sid)
                if state is not None and head >= state.last_sequence:
                    del self.unacked[sid]

    def repaired(self, session_ids: Iterable[str]) -> None:
        """These Sessions were probed and brought up to their Items."""
        for sid in session_ids:
            self.suspect.pop(sid, None)

    def release(self, shards: Iterable[Shard]) -> set[Shard]:
        """Of the shards given up, those this replica may mark ``clean`` (call after its Session
        writer drained); it holds none of them any more."""
        gone = set(shards)
        clean = ((gone & self.held & self.current) - set(self.suspect.values())
                 - set(self.unacked.values()))
        self.suspect = {sid: s for sid, s in self.suspect.items() if s not in gone}
        self.unacked = {sid: s for sid, s in self.unacked.items() if s not in gone}
        self.held -= gone
        self.current -= gone
        self.unmarked -= gone
        return clean

    # ---- records and Sessions (the handler) ----------------------------------------
    def needs_lookup(self, key: str, suspect: bool) -> bool:
        """Whether the journal is read for the record with source key ``key``; ``suspect``: what
        ``arrived`` said of it."""
        return not self.trusted or suspect or key in self.recent

    def session(self, session_id: str) -> SessionState | None:
        """The Session's state as this replica last decided it, if that can be trusted."""
        held = self.sessions.get(session_id) if self.trusted else None
        if held is None:
            return None
        state: SessionState = pickle.loads(held)
        return state

    def decided(self, keys: Iterable[str], states: dict[str, SessionState]) -> None:
        """A non-empty batch was decided from what the store and memory held, and written:
        memory holds what the store holds."""
        self.trusted = True
        self.sessions.update((sid, pickle.dumps(st, pickle.HIGHEST_PROTOCOL))
                             for sid, st in states.items())
        for k in keys:
            self.recent[k] = None

"""How far the tracker has read the observation stream, so a deadline is decided only once every
observation published before it has been read.

A receipt counts at its own Kafka timestamp, but it can only count once it is read. The
observations are consumed by their own consumer group; after a restart or a rebalance that
consumer may join, or catch up, seconds after a deadline has passed. Deciding the deadline then
would turn a call ``uncertain`` whose receipt is already on the topic.

``ReadUpTo`` is the pure part: the assignment as the rebalance listener reports it and, per
assigned partition, the next offset not yet handled. The service turns it into a time: it notes
``t0``, asks the broker for the partitions' end offsets, and once every assigned partition has
been handled up to those offsets, every observation appended before ``t0`` has been read —
deadlines up to ``t0`` may be decided. Without an assignment (joining, mid-rebalance) nothing is
known and nothing is decided; a member with an empty assignment has nothing to wait for."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class ReadUpTo:
    __slots__ = ("assigned", "generation", "handled")

    def __init__(self) -> None:
        self.assigned: frozenset[int] | None = None  # None: no assignment known
        self.handled: dict[int, int] = {}  # partition → next offset not yet handled
        self.generation = 0  # changes with every assignment change

    def assign(self, partitions: Iterable[int]) -> None:
        """A new assignment. What was handled before is forgotten: while the partitions were
        elsewhere another member may have read on, so each starts again from its committed
        offset (``start_at``)."""
        self.assigned = frozenset(partitions)
        self.handled = {}
        self.generation += 1

    def revoke(self) -> None:
        self.assigned = None
        self.handled = {}
        self.generation += 1

    def start_at(self, partition: int, offset: int) -> None:
        """Everything before ``offset`` was handled already (the group's committed offset, or
        the log's start when nothing was committed)."""
        if self.assigned is not None and partition in self.assigned:
            self.handled[partition] = max(self.handled.get(partition, 0), offset)

    def handled_record(self, partition: int, offset: int) -> None:
        """The record at ``offset`` was handled (matched, kept, or dead-lettered)."""
        if self.assigned is not None and partition in self.assigned:
            self.handled[partition] = max(self.handled.get(partition, 0), offset + 1)

    def unknown(self) -> list[int]:
        """Assigned partitions whose starting offset is not known yet."""
        return sorted((self.assigned or frozenset()) - self.handled.keys())

    def reached(self, ends: Mapping[int, int]) -> bool:
        """Whether every assigned partition has been handled up to ``ends`` (end offsets taken
        after the assignment)."""
        if self.assigned is None:
            return False
        return all(p in self.handled and self.handled[p] >= ends.get(p, 0)
                   for p in self.assigned)

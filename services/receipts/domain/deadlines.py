"""One timer structure for every pending call, so waiting calls cost memory, not timers.

A binary heap with lazy deletion: ``add`` pushes ``(deadline, seq, key)``; ``cancel`` forgets
the key's live sequence number so its heap entry is skipped when it surfaces; ``pop_due`` pops
every live entry whose deadline has passed. Re-adding a key reschedules it. When stale entries
outnumber live ones the heap is rebuilt, so memory stays proportional to the pending calls.

Costs: add O(log n), cancel O(1) amortised, pop_due O(k log n) for k entries popped,
next_deadline O(1) amortised. The service runs one loop: sleep until ``next_deadline()`` (or
until a new, earlier deadline is added), then ``pop_due(now)``. Deadlines are plain floats — the
tracker uses wall-clock epoch seconds so they survive a restart.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_COMPACT_MIN = 64


class DeadlineQueue(Generic[K]):
    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._live: dict[K, int] = {}  # key → sequence number of its live heap entry
        self._seq = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, key: object) -> bool:
        return key in self._live

    def add(self, key: K, deadline: float) -> None:
        """Schedule ``key`` at ``deadline`` (replacing any earlier schedule of ``key``)."""
        self._seq += 1
        replaced = key in self._live
        self._live[key] = self._seq
        if replaced:
            self._stale_maybe_compact()
        heapq.heappush(self._heap, (deadline, self._seq, key))

    def cancel(self, key: K) -> bool:
        """Forget ``key``; ``False`` when it was not scheduled."""
        if self._live.pop(key, None) is None:
            return False
        self._stale_maybe_compact()
        return True

    def pop_due(self, now: float, limit: int | None = None) -> list[K]:
        """Every scheduled key with ``deadline <= now``, earliest first (at most ``limit``)."""
        due: list[K] = []
        heap, live = self._heap, self._live
        while heap and heap[0][0] <= now and (limit is None or len(due) < limit):
            _, seq, key = heapq.heappop(heap)
            if live.get(key) == seq:
                del live[key]
                due.append(key)
        return due

    def next_deadline(self) -> float | None:
        """The earliest live deadline, or ``None`` when nothing is scheduled."""
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def due(self, now: float) -> bool:
        """Whether some live deadline has passed (O(1) amortised, like ``next_deadline``)."""
        nxt = self.next_deadline()
        return nxt is not None and nxt <= now

    def deadline_of(self, key: K) -> float | None:
        seq = self._live.get(key)
        if seq is None:
            return None
        for deadline, s, k in self._heap:  # O(n): diagnostics and tests only
            if s == seq and k == key:
                return deadline
        return None

    def _stale_maybe_compact(self) -> None:
        stale = len(self._heap) - len(self._live)
        if stale > _COMPACT_MIN and stale > len(self._live):
            live = self._live
            self._heap = [e for e in self._heap if live.get(e[2]) == e[1]]
            heapq.heapify(self._heap)

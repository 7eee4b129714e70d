"""In-memory stand-ins for the dispatcher binder's ports (``services/dispatcher/binder.py``):
the repository, the registry's view of the Runtimes, the outbox, and a clock the test moves.
They keep the real adapters' semantics that the rules rely on — a binding changes Runtime only
by compare-and-set, a queued record keeps its first place, documents are copies (a caller that
edits what it read does not edit the store)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.dispatcher.domain.binding import RuntimeInfo
from services.dispatcher.registry import ReadingClock, as_seen
from shared.storekeys import pending_key

Doc = dict[str, Any]


class FakeClock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start
        self.watchers: list[Callable[[float, float], None]] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        before, self.now = self.now, self.now + seconds
        for watch in self.watchers:
            watch(before, self.now)

    def at(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


class FakeRepository:
    """Every call first yields to the event loop, as a round trip to the store does, so two
    replicas' coroutines run together interleave between calls (each call itself is atomic,
    as one store command is)."""

    def __init__(self) -> None:
        self.bindings: dict[str, Doc] = {}
        self.pending_docs: dict[str, Doc] = {}

    async def binding(self, session_id: str) -> Doc | None:
        await asyncio.sleep(0)
        b = self.bindings.get(session_id)
        return copy.deepcopy(b) if b is not None else None

    async def create_binding(self, doc: Doc) -> Doc:
        await asyncio.sleep(0)
        self.bindings.setdefault(doc["_id"], copy.deepcopy(doc))
        return copy.deepcopy(self.bindings[doc["_id"]])

    async def update_binding(self, session_id: str, fields: Mapping[str, Any]) -> None:
        await asyncio.sleep(0)
        if session_id in self.bindings:
            self.bindings[session_id].update(copy.deepcopy(dict(fields)))

    async def swap_runtime(self, session_id: str, read: str | None,
                           fields: Mapping[str, Any]) -> bool:
        await asyncio.sleep(0)
        b = self.bindings.get(session_id)
        if b is None or b.get("runtime_id") != read:
            return False
        b.update(copy.deepcopy(dict(fields)))
        return True

    async def bound_to(self, runtime_id: str) -> list[Doc]:
        await asyncio.sleep(0)
        return [copy.deepcopy(b) for b in self.bindings.values()
                if b.get("runtime_id") == runtime_id]

    async def load(self) -> dict[str, int]:
        await asyncio.sleep(0)
        load: dict[str, int] = {}
        for b in self.bindings.values():
            if b.get("runtime_id") is not None:
                load[b["runtime_id"]] = load.get(b["runtime_id"], 0) + 1
        return load

    async def pending_count(self, session_id: str) -> int:
        await asyncio.sleep(0)
        return sum(1 for p in self.pending_docs.values() if p["session_id"] == session_id)

    async def queue(self, session_id: str, event_id: str, record: Doc, n: int,
                    queued_at: float, trace: Mapping[str, str] | None = None) -> None:
        await asyncio.sleep(0)
        doc = {"_id": pending_key(session_id, event_id), "session_id": session_id, "n": n,
               "queued_at": queued_at, "record": copy.deepcopy(record)}
        if trace:
            doc["trace"] = dict(trace)
        self.pending_docs.setdefault(pending_key(session_id, event_id), doc)

    async def pending(self, session_id: str) -> list[Doc]:
        await asyncio.sleep(0)
        return sorted((copy.deepcopy(p) for p in self.pending_docs.values()
                       if p["session_id"] == session_id), key=lambda p: p["n"])

    async def unqueue(self, pending_id: str) -> None:
        await asyncio.sleep(0)
        self.pending_docs.pop(pending_id, None)

    async def waiting_sessions(self) -> set[str]:
        await asyncio.sleep(0)
        return {p["session_id"] for p in self.pending_docs.values()}


class FakeRegistry:
    """The latest registration per Runtime, judged by the real ``ReadingClock``. It reads the
    topic continuously (caught up whenever asked) unless ``blind`` (the broker is away: nothing
    is read, no registration arrives)."""

    def __init__(self, clock: FakeClock, fresh_s: float = 1.0) -> None:
        self.clock = clock
        self.runtimes: dict[str, RuntimeInfo] = {}
        self.reading = ReadingClock(fresh_s)
        self.blind = False
        self.reading.caught_up(clock.now)
        clock.watchers.append(self._passes)

    def _passes(self, before: float, after: float) -> None:
        """Time passes while the tail reads: a caught-up poll every little while."""
        if self.blind:
            return
        t = before
        while t < after:
            t = min(after, t + self.reading.fresh_s / 2)
            self.reading.caught_up(t)

    def register(self, rt: RuntimeInfo) -> None:
        if not self.blind:
            self.reading.caught_up(self.clock.now)
            self.runtimes[rt.runtime_id] = rt

    def seen(self, now: datetime) -> Mapping[str, RuntimeInfo]:
        if not self.blind:
            self.reading.caught_up(now.timestamp())
        return as_seen(self.runtimes, self.reading, now)


class PublishFailed(Exception):
    pass


@dataclass
class FakeOutbox:
    facts: list[tuple[str, str, Doc]] = field(default_factory=list)
    deliveries: list[tuple[str, Doc]] = field(default_factory=list)
    fail_facts: int = 0  # the next this many fact publishes raise (a broker that refuses)

    async def publish_fact(self, session_id: str, fact_id: str, body: Doc) -> None:
        if self.fail_facts:
            self.fail_facts -= 1
            raise PublishFailed(fact_id)
        self.facts.append((session_id, fact_id, copy.deepcopy(body)))

    async def deliver(self, runtime_id: str, message: Doc) -> None:
        self.deliveries.append((runtime_id, copy.deepcopy(message)))

    def turn_failures(self, session_id: str) -> list[Doc]:
        return [b for sid, _fid, b in self.facts
                if sid == session_id and b.get("kind") == "turn" and b.get("state") == "failed"]

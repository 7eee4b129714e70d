"""Storage's hold-back of observations whose binding may still be unread
(``BatchWriter._handle``; docs/security.md, "Observations only from the bound Runtime"): an
observation of a Runtime its Session is not bound to is refused only once ``core.facts`` is
read, on its partition, to where it ended when the observation was first held; until then it and
the records after it on its partition are left out of the batch and read again (seek), while the
rest is decided. The target is fixed at the first hold: facts that keep arriving do not hold it
for ever. A fake consumer and handler stand in (the real path: test_runtime_identity.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from services.storage.batch import BatchWriter
from services.storage.handler import NotBoundYet, Outputs
from shared.topics import Topics

T = Topics(prefix="p.")
OBS, FACTS = TopicPartition(T.runtime_observations, 1), TopicPartition(T.core_facts, 1)


class Consumer:
    def __init__(self, position: int, end: int) -> None:
        self.pos, self.end = position, end
        self.seeks: list[tuple[TopicPartition, int]] = []
        self.asked = 0

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        self.asked += 1
        return {tp: self.end for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        assert tp == FACTS
        return self.pos

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))


class Handler:
    """Raises NotBoundYet for the forged key unless refused; records what it decided."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], frozenset[str]]] = []

    async def handle(self, inputs: list[dict[str, Any]], refuse: frozenset[str] = frozenset(),
                     **kw: Any) -> Outputs:
        keys = [i["fact_id"] for i in inputs]
        self.calls.append((keys, refuse))
        if "forged" in keys and "fact:forged" not in refuse:
            raise NotBoundYet(frozenset({"fact:forged"}), frozenset({"s"}))
        return Outputs()


def batch() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    recs = {"before": SimpleNamespace(topic=OBS.topic, partition=1, offset=10),
            "forged": SimpleNamespace(topic=OBS.topic, partition=1, offset=11),
            "after": SimpleNamespace(topic=OBS.topic, partition=1, offset=12),
            "fact": SimpleNamespace(topic=FACTS.topic, partition=1, offset=40)}
    inputs = [{"schema": "core.fact/1", "fact_id": k, "session_id": "s"} for k in recs]
    return inputs, {f"fact:{k}": r for k, r in recs.items()}


def writer(handler: Handler) -> BatchWriter:
    return BatchWriter(None, handler, None, None, T, {}, None, None)  # type: ignore[arg-type]


async def step(w: BatchWriter, consumer: Consumer) -> dict[TopicPartition, int]:
    inputs, by_key = batch()
    held: dict[TopicPartition, int] = {}
    await w._handle(inputs, by_key, consumer, held)
    return held


def test_held_until_the_facts_read_reach_their_end_when_first_held_then_refused(
        monkeypatch: Any) -> None:
    monkeypatch.setattr("services.storage.batch.source_key", lambda i: f"fact:{i['fact_id']}")
    h = Handler()
    w = writer(h)
    c = Consumer(position=5, end=7)
    held = asyncio.run(step(w, c))
    # the forged one and what follows it on its partition wait; the rest is decided
    assert held == {OBS: 11} and c.seeks == [(OBS, 11)]
    assert h.calls[-1] == (["before", "fact"], frozenset())
    # more facts arrived (end 9), storage read to 7: the end when first held — refused now
    c.pos, c.end = 7, 9
    held = asyncio.run(step(w, c))
    assert held == {} and h.calls[-1] == (["before", "forged", "after", "fact"],
                                          frozenset({"fact:forged"}))
    assert w.targets == {}


def test_refused_at_once_when_the_facts_are_read_to_their_end(monkeypatch: Any) -> None:
    monkeypatch.setattr("services.storage.batch.source_key", lambda i: f"fact:{i['fact_id']}")
    h = Handler()
    c = Consumer(position=7, end=7)
    held = asyncio.run(step(writer(h), c))
    assert held == {} and c.seeks == []
    assert h.calls[-1][1] == frozenset({"fact:forged"})

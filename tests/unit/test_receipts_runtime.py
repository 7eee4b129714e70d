"""Only the Runtime a result was delivered to speaks for it (docs/security.md, "Observations
only from the bound Runtime"): a receipt or a refusal that another Runtime forwards decides
nothing — the call is applied by its own Runtime's receipt, or uncertain — also after a restart
(the Runtime is stored with the pending call). On the in-memory store."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.fakes.receipts import (
    Clock,
    Facts,
    MemoryReceiptStore,
    announced,
    delivery,
    receipt,
    refusal,
    tracker,
)

WINDOW = 10.0
Doc = dict[str, Any]


def by(runtime_id: str, rec: Doc) -> Doc:
    return {**rec, "runtime_id": runtime_id}


def verdicts(facts: Facts) -> dict[str, list[str]]:
    return {k: [f["state"] for f in v] for k, v in facts.verdicts().items()}


def test_a_receipt_or_refusal_from_another_runtime_decides_nothing() -> None:
    store, facts, clock = MemoryReceiptStore(), Facts(), Clock()
    t = tracker(store, facts, clock)

    async def scenario() -> None:
        await t.observe_batch([(by("rt_a", announced("s", "a")), clock()),
                               (by("rt_a", announced("s", "b")), clock())])
        await t.open_calls([(by("rt_a", delivery("s", "a")), clock()),
                            (by("rt_a", delivery("s", "b")), clock())])
        clock.now += 1
        await t.observe_batch([(by("rt_x", receipt("s", "a")), clock()),
                               (by("rt_x", refusal("s", "b")), clock())])
        await t.drain()
        assert verdicts(facts) == {}
        clock.now += 1
        await t.observe_batch([(by("rt_a", receipt("s", "a")), clock())])
        clock.now += WINDOW
        t.read_up_to = clock()
        await t.fire_due(t.decidable(clock()))
        await t.drain()

    asyncio.run(scenario())
    assert verdicts(facts) == {"s/a": ["applied"], "s/b": ["uncertain"]}


def test_the_runtime_is_kept_across_a_restart() -> None:
    store, facts, clock = MemoryReceiptStore(), Facts(), Clock()

    async def scenario() -> None:
        first = tracker(store, facts, clock)
        await first.observe_batch([(by("rt_a", announced("s", "a")), clock())])
        await first.open_calls([(by("rt_a", delivery("s", "a")), clock())])
        again = tracker(store, facts, clock)  # a new replica: the pending call from the store
        await again.recover()
        clock.now += 1
        await again.observe_batch([(by("rt_x", receipt("s", "a")), clock())])
        clock.now += WINDOW
        again.read_up_to = clock()
        await again.fire_due(again.decidable(clock()))
        await again.drain()

    asyncio.run(scenario())
    assert verdicts(facts) == {"s/a": ["uncertain"]}

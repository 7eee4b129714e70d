"""Storage takes a Session's observations only from the Runtime a ``binding`` fact named
(docs/security.md, "Observations only from the bound Runtime"), so the dispatcher never
delivers to a Runtime before that fact is published: when publishing it failed after the
binding was claimed (the broker away in between), the next input publishes it first. And a
refusal counts only from the bound Runtime. On the binder's in-memory fakes."""

from __future__ import annotations

import pytest

from tests.support.fakes.dispatcher import PublishFailed
from tests.unit.test_binder import World, stored


def bindings(w: World, sid: str) -> list[str | None]:
    return [b.get("runtime_id") for s, _f, b in w.out.facts
            if s == sid and b.get("kind") == "binding" and b.get("status") == "bound"]


async def test_a_binding_fact_that_failed_is_published_before_the_next_delivery() -> None:
    w = World()
    w.register("rt_a")
    w.out.fail_facts = 1  # the bind fact: the broker refuses it, after the claim
    rec = stored("s1", "t1", "start")
    with pytest.raises(PublishFailed):
        await w.binder.accept(rec)
    assert bindings(w, "s1") == [] and w.delivered() == []
    doc = await w.repo.binding("s1")
    assert doc is not None and doc["runtime_id"] == "rt_a"  # claimed, never announced
    # the input again (redelivered), and a later one: the binding goes out first, once
    await w.binder.accept(rec)
    assert bindings(w, "s1") == ["rt_a"]
    assert [m["kind"] for m in w.delivered("rt_a")] == ["start"]
    await w.binder.accept(stored("s1", "t1", "steer"))
    assert bindings(w, "s1") == ["rt_a"]  # announced already: not again
    assert [m["kind"] for m in w.delivered("rt_a")] == ["start", "steer"]


async def test_every_binding_is_announced_before_its_first_delivery() -> None:
    w = World()
    w.register("rt_a")
    await w.binder.accept(stored("s1", "t1", "start"))
    assert bindings(w, "s1") == ["rt_a"]
    [(sid, _fid, body)] = [f for f in w.out.facts if f[2].get("kind") == "binding"]
    assert sid == "s1" and body["status"] == "bound"


async def test_a_refusal_counts_only_from_the_bound_runtime() -> None:
    w = World()
    w.register("rt_a")
    await w.binder.accept(stored("s1", "t1", "start"))
    refusal = {"delivery_id": w.delivered()[0]["delivery_id"], "kind": "start", "code": "x",
               "reason": "no"}
    for rid in ("rt_other", None):
        why = await w.binder.not_bound({"session_id": "s1", "runtime_id": rid,
                                        "refusal": refusal})
        assert why is not None and "(rt_a)" in why
    assert await w.binder.not_bound({"session_id": "s1", "runtime_id": "rt_a",
                                     "refusal": refusal}) is None
    # an observation that is no refusal is not the dispatcher's to judge
    assert await w.binder.not_bound({"session_id": "s1", "runtime_id": "rt_x"}) is None
    assert await w.binder.not_bound({"session_id": "s9", "runtime_id": "rt_a",
                                     "refusal": refusal}) is not None  # no binding at all

"""A Runtime restarted under the same ``runtime_id`` before its heartbeats were missed (so never
gone) lost the native Turns its previous process ran: the dispatcher sees the new
``incarnation`` in its registration, fails each Turn delivered to an earlier incarnation,
tells the Runtime to end it natively, and keeps the binding (docs/runtime-boundary.md). On the
binder's in-memory fakes."""

from __future__ import annotations

import dataclasses

from tests.unit.test_binder import World, stored


def turn_ends(w: World) -> list[tuple[str, str | None, str]]:
    return [(sid, b.get("turn_id"), b["reason"]) for sid, _f, b in w.out.facts
            if b.get("kind") == "turn" and b.get("state") == "failed"]


def restart(w: World, runtime_id: str, incarnation: str) -> None:
    w.registry.register(dataclasses.replace(w.register(runtime_id), incarnation=incarnation))


async def test_the_turns_a_restarted_runtime_ran_fail_and_are_interrupted() -> None:
    w = World()
    restart(w, "rt_a", "inc1")
    await w.binder.accept(stored("s1", "t1", "start"))
    await w.binder.accept(stored("s2", "t2", "start"))
    await w.binder.sweep()
    assert turn_ends(w) == []  # the same process: nothing lost

    restart(w, "rt_a", "inc2")
    await w.binder.accept(stored("s3", "t3", "start"))  # delivered to the new process
    await w.binder.sweep()
    why = "runtime rt_a restarted: the native Turn it ran is lost"
    assert sorted(turn_ends(w)) == [("s1", "t1", why), ("s2", "t2", why)]
    interrupts = [(m["session_id"], m["turn_id"], m["reason"])
                  for m in w.delivered("rt_a") if m["kind"] == "interrupt"]
    assert sorted(interrupts) == [("s1", "t1", why), ("s2", "t2", why)]
    for sid in ("s1", "s2", "s3"):  # the restarted Runtime keeps its Sessions
        doc = await w.repo.binding(sid)
        assert doc is not None and doc["runtime_id"] == "rt_a"

    before = len(w.out.facts), len(w.out.deliveries)
    await w.binder.sweep()  # once per incarnation
    assert (len(w.out.facts), len(w.out.deliveries)) == before
    # the next Turn goes to the restarted process, and a later restart fails it in turn
    # (a Turn failed already is not failed again)
    await w.binder.accept(stored("s1", "t4", "start"))
    restart(w, "rt_a", "inc3")
    await w.binder.sweep()
    assert sorted((s, t) for s, t, _ in turn_ends(w)[2:]) == [("s1", "t4"), ("s3", "t3")]


async def test_a_runtime_that_reports_no_incarnation_is_never_taken_for_restarted() -> None:
    w = World()
    w.register("rt_a")
    await w.binder.accept(stored("s1", "t1", "start"))
    w.register("rt_a")  # registers again (a heartbeat), no incarnation
    await w.binder.sweep()
    restart(w, "rt_a", "inc1")  # from now on it reports one: what ran before is unknown
    await w.binder.sweep()
    assert turn_ends(w) == []

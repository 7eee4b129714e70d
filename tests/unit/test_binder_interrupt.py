"""When the dispatcher fails a Turn that its Runtime is running, it tells the Runtime to end
the native Turn (``kind: "interrupt"`` on ``runtime.deliveries``), so the native Turn makes no
later call on a Turn Core shows as failed (issue 57 item 8; docs/runtime-boundary.md, "A Turn
the dispatcher fails is interrupted at its Runtime"). The decision, table-driven on the
binder's in-memory fakes."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter

from shared.domain import wire
from shared.domain.poison import Poison
from shared.kafka import encode
from shared.messages import decode, runtime
from tests.unit.test_binder import World, stored

Doc = dict[str, Any]


def failures(w: World, sid: str) -> list[Doc]:
    return w.out.turn_failures(sid)


def interrupts(w: World) -> list[tuple[str, Doc]]:
    return [(rid, m) for rid, m in w.out.deliveries if m["kind"] == "interrupt"]


# (what the Runtime reports, the second input, what the dispatcher does with it)
CASES = [
    # a steer with images into the running Turn of a text-only Runtime: failed + interrupted
    ({"message_images": False}, ("steer", True), "interrupt"),
    # a function result with images for a Runtime without function-result images: likewise
    ({"function_result_images": False}, ("function_result", True), "interrupt"),
    # what the Runtime can take is delivered: nothing fails, nothing is interrupted
    ({"message_images": False}, ("steer", False), "deliver"),
    ({"message_images": True}, ("steer", True), "deliver"),
    ({"function_result_images": True}, ("function_result", True), "deliver"),
    # a new Turn that opens with images moves before it starts: nothing runs natively to end
    ({"message_images": False}, ("start", True), "rebind"),
]


@pytest.mark.parametrize(("caps", "second", "outcome"), CASES,
                         ids=[f"{k}{'+img' if i else ''}-{o}" for _c, (k, i), o in CASES])
async def test_the_dispatcher_interrupts_the_turn_it_fails_at_delivery(
        caps: dict[str, bool], second: tuple[str, bool], outcome: str) -> None:
    w = World()
    w.register("rt_a", **caps)
    await w.binder.accept(stored("s1", "t1", "start"))
    kind, images = second
    turn = "t2" if kind == "start" else "t1"
    rec = stored("s1", turn, kind, images=images)
    await w.binder.accept(rec)
    got = interrupts(w)
    if outcome == "interrupt":
        [failed] = failures(w, "s1")
        assert failed["turn_id"] == "t1"
        [(rid, m)] = got
        assert rid == "rt_a"
        assert m == {"schema": wire.DELIVERY_SCHEMA,
                     "delivery_id": wire.interrupt_delivery_id(rec["event_id"]),
                     "runtime_id": "rt_a", "session_id": "s1", "turn_id": "t1",
                     "kind": "interrupt", "reason": failed["reason"]}
        # the failure is published before the interrupt: a Runtime that ends the Turn at once
        # reports an end for a Turn Core has already failed (written as nothing)
        assert [d["kind"] for _r, d in w.out.deliveries] == ["start", "interrupt"]
    else:
        assert got == [] and failures(w, "s1") == []
        kinds = [d["kind"] for _r, d in w.out.deliveries]
        assert kinds == (["start"] if outcome == "rebind" else ["start", kind])


async def test_an_input_failed_while_no_runtime_carries_the_turn_interrupts_nothing() -> None:
    """The bind timeout fails an input that waited for a Runtime: none runs its Turn."""
    w = World()
    await w.binder.accept(stored("s1", "t1", "start"))
    w.clock.advance(31)
    await w.binder.sweep()
    assert len(failures(w, "s1")) == 1
    assert interrupts(w) == []


async def test_a_dead_lettered_steer_interrupts_the_turn_its_runtime_runs() -> None:
    """A steer the dispatcher cannot handle at all (dead-lettered, ``fail_input``) fails the
    Turn the bound Runtime is running: that Runtime is told to end it; a Runtime that runs
    another Turn by then is not."""
    w = World()
    w.register("rt_a")
    await w.binder.accept(stored("s1", "t1", "start"))
    await w.binder.fail_input(stored("s1", "t1", "steer"), "the input cannot be delivered: x")
    assert [(rid, m["turn_id"], m["reason"]) for rid, m in interrupts(w)] == [
        ("rt_a", "t1", "the input cannot be delivered: x")]
    await w.binder.accept(stored("s1", "t2", "start"))
    await w.binder.fail_input(stored("s1", "t1", "steer"), "late")  # t1 no longer runs there
    assert len(interrupts(w)) == 1


async def test_a_redelivered_refused_steer_interrupts_under_the_same_delivery_id() -> None:
    """Handled twice (a crash before the offset was committed): the same interrupt id, which
    the Runtime drops as a duplicate."""
    w = World()
    w.register("rt_a", message_images=False)
    await w.binder.accept(stored("s1", "t1", "start"))
    rec = stored("s1", "t1", "steer", images=True)
    await w.binder.accept(rec)
    await w.binder.accept(rec)
    ids = [m["delivery_id"] for _r, m in interrupts(w)]
    assert ids == [wire.interrupt_delivery_id(rec["event_id"])] * 2


def test_an_interrupt_is_the_contract_and_what_a_runtime_reads() -> None:
    rec = wire.interrupt_delivery(delivery_id="int_1", runtime_id="rt_" + "a" * 32,
                                  session_id="session_" + "b" * 32, turn_id="turn_1",
                                  reason="message_images_unsupported: …")
    TypeAdapter(runtime.RuntimeDelivery).validate_python(rec)
    got = decode.DELIVERY.decode(encode(rec))
    assert not isinstance(got, Poison) and got.value == rec
    assert wire.event_of_delivery(wire.interrupt_delivery_id("evt_ab")) is None

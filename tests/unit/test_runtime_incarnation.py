"""Deliveries name the Runtime process they were sent to (docs/runtime-boundary.md,
"Binding", restarted under the same id). The dispatcher stamps each delivery with the
``incarnation`` the Runtime registered (``Binder.send``); a process of that Runtime with
another incarnation — one restarted after its predecessor read the delivery but before it
committed the offset — does not run it again (``DeliveryLoop.handle_raw``). Without the rule,
a Turn Core had already completed got a second native Turn from the restarted process
(docs/chaos.md, "Known limitations")."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from runtimes.deliveries import DeliveryLoop
from runtimes.outbox import ObservationOutbox
from services.dispatcher.binder import Binder
from shared.domain.wire import function_result_delivery, interrupt_delivery, message_delivery
from shared.kafka import encode
from shared.messages import decode

RT = "rt_" + "a" * 32
SID = "session_" + "b" * 32
ME, BEFORE = "1" * 32, "0" * 32


def start(delivery_id: str) -> dict[str, Any]:
    return message_delivery(
        delivery_id=delivery_id, runtime_id=RT, session_id=SID, turn_id="turn_1", kind="start",
        messages=[{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])


def result(delivery_id: str) -> dict[str, Any]:
    return function_result_delivery(
        delivery_id=delivery_id, runtime_id=RT, session_id=SID, turn_id="turn_1", call_id="c1",
        name="f", success=True, output="ok", error=None, fields_present=None)


def interrupt(delivery_id: str) -> dict[str, Any]:
    return interrupt_delivery(delivery_id=delivery_id, runtime_id=RT, session_id=SID,
                              turn_id="turn_1", reason="failed")


def loop_handling(incarnation: str | None) -> tuple[DeliveryLoop, list[str]]:
    handled: list[str] = []

    async def handle(d: Mapping[str, Any]) -> None:
        handled.append(str(d["delivery_id"]))

    async def dead_letter(_r: Any, _p: Any) -> None:
        raise AssertionError("nothing here is poison")

    outbox = ObservationOutbox(SimpleNamespace(), "runtime.observations")  # type: ignore[arg-type]
    loop = DeliveryLoop(SimpleNamespace(), RT, handle, outbox,  # type: ignore[arg-type]
                        asyncio.Event(), dead_letter, incarnation=incarnation)
    return loop, handled


def record(delivery: Mapping[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(key=RT.encode(), value=encode(delivery), headers=[])


@pytest.mark.parametrize("build", [start, result, interrupt], ids=["start", "result", "interrupt"])
async def test_a_delivery_sent_to_an_earlier_process_is_not_run(build: Any) -> None:
    loop, handled = loop_handling(ME)
    counted = await loop.handle_raw(record({**build("dlv_old"), "incarnation": BEFORE}))
    assert handled == []
    assert counted == 1  # read (its offset is committed like any other), just not run


@pytest.mark.parametrize("build", [start, result, interrupt], ids=["start", "result", "interrupt"])
async def test_a_delivery_sent_to_this_process_is_run(build: Any) -> None:
    loop, handled = loop_handling(ME)
    await loop.handle_raw(record({**build("dlv_mine"), "incarnation": ME}))
    assert handled == ["dlv_mine"]


@pytest.mark.parametrize(("sent_to", "mine"), [(None, ME), (BEFORE, None), (None, None)],
                         ids=["unstamped", "process-without-incarnation", "neither"])
async def test_without_both_incarnations_the_delivery_is_run(sent_to: str | None,
                                                             mine: str | None) -> None:
    # a dispatcher of a Runtime that reports no incarnation stamps none; a Runtime that
    # registered none cannot tell: both run it, as before the rule (at least once)
    loop, handled = loop_handling(mine)
    delivery = start("dlv_x") if sent_to is None else {**start("dlv_x"), "incarnation": sent_to}
    await loop.handle_raw(record(delivery))
    assert handled == ["dlv_x"]


class Out:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def deliver(self, runtime_id: str, delivery: dict[str, Any]) -> None:
        self.sent.append((runtime_id, delivery))


@pytest.mark.parametrize("incarnation", [ME, None], ids=["registered", "not-registered"])
async def test_the_dispatcher_stamps_the_registered_incarnation(incarnation: str | None) -> None:
    binder = SimpleNamespace(out=Out(), core_key=None)
    rt = SimpleNamespace(runtime_id=RT, incarnation=incarnation, sealed_key=None)
    await Binder.send(binder, rt, start("dlv_1"))  # type: ignore[arg-type]
    [(to, sent)] = binder.out.sent
    assert to == RT
    assert sent.get("incarnation") == incarnation
    assert ("incarnation" in sent) == (incarnation is not None)
    # the record keeps to the published model, the field included
    got = decode.DELIVERY.decode(encode(sent))
    assert not isinstance(got, decode.Poison)
    assert got.model.incarnation == incarnation

"""Waiting for a Turn (services/admission/domain/waiting.py): query parameters, wait slots, and
which Items answer a wait."""

from __future__ import annotations

from typing import Any

import pytest

from services.admission.domain.waiting import TurnWatch, WaitRequest, WaitSlots, parse_wait
from shared.domain.errors import ApiError
from tests.support.builders import assert_error


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, WaitRequest(False, 120_000)),
        ({"wait": "true"}, WaitRequest(True, 120_000)),
        ({"wait": "TRUE", "timeout_ms": "1"}, WaitRequest(True, 1)),
        ({"wait": "1", "timeout_ms": "600000"}, WaitRequest(True, 600_000)),
        ({"wait": "false", "timeout_ms": "5000"}, WaitRequest(False, 5000)),
        ({"wait": "no"}, WaitRequest(False, 120_000)),
        ({"wait": "true", "timeout_ms": "599999"}, WaitRequest(True, 599_999)),
        ({"wait": "true", "timeout_ms": "0600000"}, WaitRequest(True, 600_000)),
    ],
)
def test_parse_wait(params: dict[str, str], expected: WaitRequest) -> None:
    assert parse_wait(params) == expected


# CONTRACT §1 and seed 004: "timeout_ms … (default 120000, capped at 600000)" — a larger budget
# is clamped to the cap, never refused. Any ASCII decimal integer above the
# cap is clamped, whatever its size; values below 1 stay refused.
CLAMPED = ["600001", "700000", "9999999", "9223372036854775807", "9" * 50, "0" * 30 + "600001",
           "1" + "0" * 5000]


@pytest.mark.parametrize("raw", CLAMPED, ids=lambda r: r if len(r) < 40 else f"{len(r)} digits")
@pytest.mark.parametrize("wait", ["true", "false"])
def test_timeout_ms_above_the_cap_is_clamped_to_600000(raw: str, wait: str) -> None:
    assert parse_wait({"wait": wait, "timeout_ms": raw}) == WaitRequest(wait == "true", 600_000)


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"wait": "true", "timeout_ms": "0"}, "timeout_ms"),
        ({"wait": "true", "timeout_ms": "-5"}, "timeout_ms"),
        ({"wait": "true", "timeout_ms": "1.5"}, "timeout_ms"),
        ({"wait": "true", "timeout_ms": ""}, "timeout_ms"),
        ({"wait": "true", "timeout_ms": "١٢"}, "timeout_ms"),  # non-ASCII digits
        ({"wait": "true", "timeout_ms": "+1"}, "timeout_ms"),
        ({"wait": "true", "timeout_ms": "600001.0"}, "timeout_ms"),
        ({"wait": "maybe"}, "wait"),
    ],
)
def test_parse_wait_rejects(params: dict[str, str], param: str) -> None:
    assert_error(parse_wait(params), 400, "invalid_request", param)


def test_slots_bound_per_replica_and_per_tenant() -> None:
    slots = WaitSlots(per_replica=3, per_tenant=2)
    assert slots.acquire("a") and slots.acquire("a")
    assert not slots.acquire("a")  # tenant a at its bound
    assert slots.acquire("b")
    assert not slots.acquire("c")  # replica at its bound
    slots.release("a")
    assert slots.acquire("b") and slots.by_tenant == {"a": 1, "b": 2}
    assert not slots.acquire("a")  # the replica is full again
    slots.release("b")
    slots.release("b")
    slots.release("a")
    assert slots.total == 0 and slots.by_tenant == {}
    slots.release("never")  # releasing what was not held changes nothing
    assert slots.total == 0


def item(seq: int, kind: str, turn_id: str | None = "turn_1", **body: Any) -> dict[str, Any]:
    it: dict[str, Any] = {"id": f"item_{seq}", "session_id": "session_1", "sequence": seq,
                          "type": kind, "schema": "session.item/1", **body}
    if turn_id is not None:
        it["turn_id"] = turn_id
    return it


def test_watch_collects_its_turn_in_order_until_it_ends() -> None:
    w = TurnWatch([item(4, "message"), item(5, "turn", state="started")])
    assert not w.done
    assert not w.offer(item(3, "message", turn_id="turn_0"))  # before the input
    assert not w.offer(item(6, "message", turn_id="turn_2"))  # another Turn
    assert w.offer(item(8, "function_call", call_id="c"))
    assert w.offer(item(7, "message"))
    assert not w.offer(item(7, "message"))  # a repeat (store and tail both)
    assert w.offer(item(9, "turn", state="completed"))
    assert w.done
    assert [it["sequence"] for it in w.items()] == [4, 5, 7, 8, 9]
    assert all("schema" not in it for it in w.items())


def test_watch_of_a_result_also_waits_for_its_application() -> None:
    w = TurnWatch([item(6, "function_call_output", call_id="c1")])
    assert w.offer(item(7, "turn", state="completed"))
    assert not w.done  # the Turn ended, the application is not decided yet
    assert not w.offer(item(8, "function_call_application", turn_id=None, call_id="c2"))
    assert w.offer(item(9, "function_call_application", turn_id=None, call_id="c1",
                        state="applied"))
    assert w.done


def test_watch_turn_that_ended_before_the_input() -> None:
    w = TurnWatch([item(6, "function_call_output", call_id="c1")])
    w.turn_ended_before("turn_1", running=True)
    assert not w.turn_over
    w.turn_ended_before("turn_1", running=False)
    assert w.turn_over and not w.done
    w2 = TurnWatch([item(6, "message")])
    w2.turn_ended_before("turn_9", running=True)  # a later Turn runs: ours is over
    assert w2.done


def test_watch_failed_turn_is_terminal() -> None:
    w = TurnWatch([item(1, "message"), item(2, "turn", state="started")])
    w.offer(item(3, "turn", state="failed", reason="runtime gone"))
    assert w.done and w.items()[-1]["state"] == "failed"


def test_parse_wait_never_raises_on_odd_values() -> None:
    for raw in ["", " ", "+1", "1e3", "0x10", "-" + "9" * 50, "9" * 50 + "x"]:
        result = parse_wait({"wait": "true", "timeout_ms": raw})
        assert isinstance(result, ApiError) and result.param == "timeout_ms"

"""How the chaos rows count the inputs in flight at a fault (``chaosload.in_flight_at``): sent
before it, and not yet done with then — stored and published, delivered to the Runtime, its
Turn ended (a message) or its call decided (a result), by the records' Kafka timestamps."""

from __future__ import annotations

from tests.support.chaos import p_detect
from tests.support.chaosload import TS, Input, Load, done_at, in_flight_at

CONTENT = [{"type": "input_text", "text": "m1"}]


def _load() -> Load:
    load = Load("http://127.0.0.1:1", "key", "t", sessions=1)
    load.runs[0].session_id = "s"
    return load


def _records(item_at: float, delivered_at: float, ended_at: float
             ) -> tuple[dict[str, list[dict[str, object]]], dict[str, list[dict[str, object]]]]:
    topic = [{"type": "message", "content": CONTENT, "turn_id": "t1", TS: item_at},
             {"type": "turn", "turn_id": "t1", "state": "completed", TS: ended_at}]
    deliveries = [{"kind": "start", "messages": [{"content": CONTENT}], TS: delivered_at}]
    return {"s": topic}, {"s": deliveries}


def test_a_message_is_in_flight_from_its_send_until_its_turn_ended() -> None:
    load = _load()
    load.runs[0].inputs.append(Input(0, "message", "m1", "i", content=CONTENT, sent_at=10.0))
    topic, deliveries = _records(11.0, 12.0, 15.0)
    assert done_at(load.runs[0].inputs[0], topic["s"], deliveries["s"]) == 15.0
    assert [in_flight_at(load, t, topic, deliveries) for t in (9.9, 10.0, 12.5, 14.9, 15.0)] \
        == [0, 1, 1, 1, 0]


def test_an_input_never_stored_or_delivered_stays_in_flight() -> None:
    load = _load()
    load.runs[0].inputs.append(Input(0, "message", "m1", "i", content=CONTENT, sent_at=10.0))
    assert in_flight_at(load, 1e12, {"s": []}, {"s": []}) == 1


def test_a_result_is_in_flight_until_its_call_is_decided() -> None:
    load = _load()
    load.runs[0].inputs.append(Input(0, "result", "f", "i", call_id="c1", sent_at=10.0))
    topic = {"s": [{"type": "function_call_output", "call_id": "c1", TS: 11.0},
                   {"type": "function_call_application", "call_id": "c1", TS: 20.0}]}
    deliveries = {"s": [{"kind": "function_result", "call_id": "c1", TS: 12.0}]}
    assert [in_flight_at(load, t, topic, deliveries) for t in (15.0, 20.0)] == [1, 0]


def test_power_of_200_in_flight() -> None:
    assert round(p_detect(200), 3) == 0.982 and p_detect(148) < 0.95 <= p_detect(149)

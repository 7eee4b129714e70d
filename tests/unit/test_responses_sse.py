"""The scripted model server's Responses-API stream (scripted_model/responses_api.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scripted_model.responses_api import events, failure, sse


def _ids() -> Any:
    n = iter(range(100))
    return lambda: f"{next(n):02d}"


def test_sse_is_one_event_line_one_data_line_and_a_blank_line() -> None:
    raw = sse("response.created", {"type": "response.created", "x": "a\nb"})
    assert raw == b'event: response.created\ndata: {"type":"response.created","x":"a\\nb"}\n\n'


def kinds(reply: list[dict[str, Any]]) -> list[Any]:
    return [e if isinstance(e, float) else e[0] for e in events(reply, {"input": "hi"}, _ids())]


# a reply → the event sequence Codex reads
@pytest.mark.parametrize(("reply", "expected"), [
    ([{"text": "hi"}], ["response.created", "response.output_item.added",
                        "response.output_text.delta", "response.output_item.done",
                        "response.completed"]),
    ([{"tool_call": {"name": "f", "arguments": {"a": 1}}}],
     ["response.created", "response.output_item.added", "response.output_item.done",
      "response.completed"]),
    ([{"wait": 1.5}, {"text": "late"}],
     ["response.created", 1.5, "response.output_item.added", "response.output_text.delta",
      "response.output_item.done", "response.completed"]),
])
def test_event_order(reply: list[dict[str, Any]], expected: list[Any]) -> None:
    assert kinds(reply) == expected


def test_a_tool_call_item_carries_call_id_name_and_arguments_as_a_json_string() -> None:
    evs = events([{"text": "calling"},
                  {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"},
                                 "call_id": "call_1"}}], {"input": []}, _ids())
    done = [e[1] for e in evs if not isinstance(e, float) and e[0] == "response.output_item.done"]
    assert [d["output_index"] for d in done] == [0, 1]
    item = done[1]["item"]
    assert (item["type"], item["call_id"], item["name"]) == ("function_call", "call_1",
                                                             "get_weather")
    assert json.loads(item["arguments"]) == {"city": "Paris"}
    assert done[0]["item"]["content"] == [{"type": "output_text", "text": "calling",
                                           "annotations": []}]
    last = evs[-1]
    assert not isinstance(last, float)
    assert last[1]["response"]["output"] == [d["item"] for d in done]
    assert last[1]["response"]["usage"]["total_tokens"] > 0


def test_a_fail_step_is_an_http_error() -> None:
    assert failure([{"fail": {"status": 503, "message": "down"}}]) == {"status": 503,
                                                                       "message": "down"}
    assert failure([{"text": "fine"}]) is None


def test_a_message_step_carries_its_phase_and_the_usage_is_the_recorded_one() -> None:
    usage = {"input_tokens": 40, "cached_input_tokens": 10, "output_tokens": 3}
    out = [e for e in events([{"message": {"text": " a\n", "phase": "final_answer"}}],
                             {"input": "hi"}, _ids(), usage=usage) if not isinstance(e, float)]
    done = [d["item"] for name, d in out if name == "response.output_item.done"]
    assert done == [{"type": "message", "id": "msg_01", "role": "assistant",
                     "status": "completed", "phase": "final_answer",
                     "content": [{"type": "output_text", "text": " a\n", "annotations": []}]}]
    completed = out[-1][1]["response"]["usage"]
    assert (completed["input_tokens"], completed["input_tokens_details"]["cached_tokens"],
            completed["output_tokens"]) == (40, 10, 3)

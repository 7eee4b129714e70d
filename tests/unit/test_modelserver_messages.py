"""The Messages API encoding of the scripted model server (what Claude Code 2.1.328 reads)."""

from __future__ import annotations

import json

import httpx
import pytest

from scripted_model import messages_api
from scripted_model.script import Scripts
from scripted_model.server import build_app

TOOLS = [{"name": "Agent"}, {"name": "Bash"}, {"name": "mcp__core__get_weather"},
         {"name": "mcp__other__lookup"}]


@pytest.mark.parametrize(("public", "tools", "expected"), [
    ("get_weather", TOOLS, "mcp__core__get_weather"),
    ("lookup", TOOLS, "mcp__other__lookup"),
    ("Agent", TOOLS, "Agent"),                      # a built-in keeps its name
    ("get_weather", None, "mcp__core__get_weather"),  # no tools listed: Core's MCP server
    ("missing", TOOLS, "mcp__core__missing"),
])
def test_tool_name_maps_public_name_to_the_tool_the_model_sees(
        public: str, tools: list[dict[str, str]] | None, expected: str) -> None:
    assert messages_api.tool_name(public, tools) == expected


def _parse_sse(raw: str) -> list[tuple[str, dict[str, object]]]:
    events = []
    for chunk in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_sse_text_reply_event_order_and_end_turn() -> None:
    blocks = messages_api.content_blocks([{"text": "hello"}], TOOLS)
    events = messages_api.sse_events(blocks, "m")
    assert [e for e, _ in events] == ["message_start", "content_block_start",
                                      "content_block_delta", "content_block_stop",
                                      "message_delta", "message_stop"]
    assert all(d["type"] == e for e, d in events)
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "hello"}
    assert events[4][1]["delta"]["stop_reason"] == "end_turn"  # type: ignore[index]
    assert events[0][1]["message"]["content"] == []  # type: ignore[index]


def test_sse_tool_call_streams_input_json_and_stops_for_tool_use() -> None:
    reply = [{"text": "let me look"},
             {"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"},
                            "call_id": "toolu_1"}}]
    events = messages_api.sse_events(messages_api.content_blocks(reply, TOOLS), "m")
    starts = [d for e, d in events if e == "content_block_start"]
    assert [s["index"] for s in starts] == [0, 1]
    assert starts[1]["content_block"] == {"type": "tool_use", "id": "toolu_1",
                                          "name": "mcp__core__get_weather", "input": {}}
    deltas = [d["delta"] for e, d in events if e == "content_block_delta"]
    assert deltas[1] == {"type": "input_json_delta", "partial_json": '{"city":"Oslo"}'}
    assert json.loads(deltas[1]["partial_json"]) == {"city": "Oslo"}  # type: ignore[index]
    assert next(d for e, d in events if e == "message_delta")["delta"]["stop_reason"] == "tool_use"


def test_generated_tool_ids_are_unique_and_toolu_prefixed() -> None:
    reply = [{"tool_call": {"name": "a"}}, {"tool_call": {"name": "a"}}]
    ids = [b["id"] for b in messages_api.content_blocks(reply, None)]
    assert len(set(ids)) == 2 and all(i.startswith("toolu_") for i in ids)


async def _post(scripts: Scripts, body: dict[str, object]) -> httpx.Response:
    transport = httpx.ASGITransport(app=build_app(scripts))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.post("/v1/messages?beta=true", json=body)


async def test_streamed_request_plays_the_script_and_is_recorded() -> None:
    scripts = Scripts()
    scripts.register("KEY", [[{"text": "first"}], [{"text": "second"}]])
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "KEY hi"}]}
    r = await _post(scripts, body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = _parse_sse(r.text)
    assert events[2][1]["delta"] == {"type": "text_delta", "text": "first"}
    assert [q.script_key for q in scripts.recorded()] == ["KEY"]
    assert scripts.recorded()[0].body == body


async def test_non_streamed_request_is_a_side_request_and_does_not_consume_the_script() -> None:
    scripts = Scripts()
    scripts.register("KEY", [[{"text": "scripted"}]])
    side = await _post(scripts, {"model": "m", "stream": False,
                                 "messages": [{"role": "user", "content": "KEY title"}]})
    assert side.status_code == 200
    msg = side.json()
    assert msg["type"] == "message" and msg["role"] == "assistant"
    assert msg["content"] == [{"type": "text", "text": "ok"}] and msg["stop_reason"] == "end_turn"
    assert scripts.requests[0].side is True and scripts.requests[0].script_key is None
    streamed = await _post(scripts, {"model": "m", "stream": True,
                                     "messages": [{"role": "user", "content": "KEY go"}]})
    assert _parse_sse(streamed.text)[2][1]["delta"]["text"] == "scripted"  # type: ignore[index]


async def test_fail_step_answers_an_anthropic_error() -> None:
    scripts = Scripts()
    scripts.register("KEY", [[{"fail": {"status": 529, "message": "overloaded"}}]])
    r = await _post(scripts, {"stream": True, "messages": [{"role": "user", "content": "KEY"}]})
    assert r.status_code == 529
    assert r.json() == {"type": "error", "error": {"type": "api_error", "message": "overloaded"}}

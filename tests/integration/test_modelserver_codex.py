"""The real ``codex app-server`` completes Turns against the scripted model server: what Codex
reads of the Responses API (the stream), and what the model receives (the request log)."""

from __future__ import annotations

import asyncio
import json

from runtimes.codex.rpc import BareCodex
from runtimes.live import DEFAULT_FUNCTIONS, default_binary
from scripted_model.server import ModelServer
from tests.support.skips import unavailable

try:
    default_binary("codex")
except FileNotFoundError:
    unavailable("codex is not installed (python3 -m deploy.local.stack install)", module=True)


async def test_a_text_turn_completes_and_the_model_got_the_input(model: ModelServer) -> None:
    model.scripts.register("IT-text", [[{"text": "scripted answer"}]])
    async with BareCodex(model.url + "/v1", list(DEFAULT_FUNCTIONS)) as c:
        turn = await c.turn([{"type": "text", "text": "IT-text hello"}])
        done = await c.wait_for("turn/completed", threadId=c.thread_id)
        answer = [m["params"]["item"]["text"] for m in c.printed
                  if m.get("method") == "item/completed"
                  and m["params"]["item"]["type"] == "agentMessage"]
    assert done["params"]["turn"]["id"] == turn
    assert done["params"]["turn"]["status"] == "completed"
    assert answer == ["scripted answer"]
    [req] = model.scripts.recorded("IT-text")
    assert req.body["stream"] is True
    assert req.body["input"][-1]["content"] == [{"type": "input_text", "text": "IT-text hello"}]
    # Codex's own shell, web-search, sub-agent, goal, app and plugin tools are configured off;
    # view_image and request_user_input cannot be (0.169)
    assert sorted(t.get("name") or t["type"] for t in req.body["tools"]) == [
        "get_weather", "request_user_input", "view_image"]


async def test_a_tool_call_round_trip_reaches_the_model_as_function_call_output(
        model: ModelServer) -> None:
    model.scripts.register("IT-tool", [[{"tool_call": {"name": "get_weather",
                                                       "arguments": {"city": "Oslo"}}}],
                                       [{"text": "it is cold"}]])
    async with BareCodex(model.url + "/v1", list(DEFAULT_FUNCTIONS)) as c:
        await c.turn([{"type": "text", "text": "IT-tool weather?"}])
        req = await c.wait_for("item/tool/call")
        assert req["params"]["arguments"] == {"city": "Oslo"}
        c.send({"id": req["id"], "result": {"contentItems": [
            {"type": "inputText", "text": "-3 C"}], "success": True}})
        await asyncio.wait_for(c.wait_for("turn/completed"), 60)
    second = model.scripts.recorded("IT-tool")[1].body["input"]
    outputs = [i for i in second if i.get("type") == "function_call_output"]
    assert len(outputs) == 1 and outputs[0]["call_id"] == req["params"]["callId"]
    assert "-3 C" in json.dumps(outputs[0]["output"])


async def test_a_model_failure_fails_the_turn(model: ModelServer) -> None:
    model.scripts.register("IT-fail", [[{"fail": {"status": 400, "message": "bad request"}}]])
    async with BareCodex(model.url + "/v1", list(DEFAULT_FUNCTIONS)) as c:
        await c.turn([{"type": "text", "text": "IT-fail hi"}])
        done = await c.wait_for("turn/completed", within_s=90)
    assert done["params"]["turn"]["status"] == "failed"

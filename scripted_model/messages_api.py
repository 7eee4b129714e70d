"""The Anthropic Messages API as Claude Code 2.1.328 consumes it (``POST /v1/messages?beta=true``).

Claude Code streams its conversation requests (``"stream": true``) and reads SSE:
``message_start``, per content block ``content_block_start`` / ``content_block_delta``
(``text_delta`` or ``input_json_delta``) / ``content_block_stop``, then ``message_delta`` (with
``stop_reason``: ``tool_use`` when the reply calls a tool, else ``end_turn``) and
``message_stop``. A few of its calls are not streamed (``"stream": false``: a title, a quota
probe): those get a plain JSON message and are recorded as *side* requests, so they never consume
a script's reply.

A ``tool_call`` step names the public function; the model sees Core's functions as MCP tools
``mcp__<server>__<name>``, so the name is mapped to the tool in the request's ``tools`` list that
is called ``name`` or ends with ``__name`` (a built-in such as ``Task`` keeps its name);
when the request lists no such tool the name becomes ``mcp__core__<name>``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from scripted_model.script import Reply, Scripts

MCP_SERVER = "core"
MODEL = "scripted-model"
_ids = itertools.count(1)

Json = dict[str, Any]


def tool_name(public: str, tools: Sequence[Mapping[str, Any]] | None) -> str:
    """The name the model must call for the public function ``public``."""
    names = [str(t.get("name", "")) for t in tools or () if isinstance(t, Mapping)]
    if public in names:
        return public
    for name in names:
        if name.startswith("mcp__") and name.endswith(f"__{public}"):
            return name
    return f"mcp__{MCP_SERVER}__{public}"


def _tool_id(step: Mapping[str, Any]) -> str:
    given = step.get("call_id")
    return str(given) if given else f"toolu_{uuid.uuid4().hex[:24]}"


def content_blocks(reply: Reply, tools: Sequence[Mapping[str, Any]] | None) -> list[Json]:
    """The assistant content blocks a reply produces (``wait`` / ``fail`` steps make none)."""
    blocks: list[Json] = []
    for step in reply:
        if "text" in step:
            blocks.append({"type": "text", "text": step["text"]})
        elif "message" in step:  # the Messages API has no phase
            blocks.append({"type": "text", "text": step["message"]["text"]})
        elif "tool_call" in step:
            call = step["tool_call"]
            blocks.append({"type": "tool_use", "id": _tool_id(call),
                           "name": tool_name(call["name"], tools),
                           "input": call.get("arguments") or {}})
    return blocks


def stop_reason(blocks: Sequence[Mapping[str, Any]]) -> str:
    return "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"


def anthropic_usage(usage: dict[str, int] | None) -> Json:
    """``script.token_usage`` as the Messages API counts it: ``input_tokens`` excludes what was
    read from the cache (``cache_read_input_tokens``)."""
    if usage is None:
        return {"input_tokens": 1, "output_tokens": 1}
    return {"input_tokens": usage["input_tokens"] - usage["cached_input_tokens"],
            "cache_read_input_tokens": usage["cached_input_tokens"],
            "cache_creation_input_tokens": 0, "output_tokens": usage["output_tokens"]}


def message(blocks: list[Json], model: str, usage: dict[str, int] | None = None) -> Json:
    """The whole assistant message (the non-streamed answer)."""
    return {"id": f"msg_{next(_ids):024d}", "type": "message", "role": "assistant",
            "model": model, "content": blocks, "stop_reason": stop_reason(blocks),
            "stop_sequence": None, "usage": anthropic_usage(usage)}


def sse_events(blocks: list[Json], model: str, usage: dict[str, int] | None = None
               ) -> list[tuple[str, Json]]:
    """The SSE events of one streamed assistant message, in order: the input counts in
    ``message_start``, the output count in ``message_delta`` (as the Messages API sends them)."""
    start = message([], model, usage)
    start["usage"] = {**start["usage"], "output_tokens": 1}
    start["stop_reason"] = None
    events: list[tuple[str, Json]] = [("message_start", {"type": "message_start",
                                                          "message": start})]
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            events.append(("content_block_start", {"type": "content_block_start", "index": i,
                                                   "content_block": {"type": "text", "text": ""}}))
            events.append(("content_block_delta", {"type": "content_block_delta", "index": i,
                                                   "delta": {"type": "text_delta",
                                                             "text": block["text"]}}))
        else:
            events.append(("content_block_start", {
                "type": "content_block_start", "index": i,
                "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"],
                                  "input": {}}}))
            events.append(("content_block_delta", {
                "type": "content_block_delta", "index": i,
                "delta": {"type": "input_json_delta",
                          "partial_json": json.dumps(block["input"], separators=(",", ":"))}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(("message_delta", {"type": "message_delta",
                                     "delta": {"stop_reason": stop_reason(blocks),
                                               "stop_sequence": None},
                                     "usage": {"output_tokens": anthropic_usage(usage)[
                                         "output_tokens"]}}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode_sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _error(status: int, text: str) -> Response:
    return JSONResponse({"type": "error", "error": {"type": "api_error", "message": text}},
                        status_code=status)


async def handle(scripts: Scripts, path: str, raw: str, body: dict[str, Any]) -> Response:
    streamed = bool(body.get("stream"))
    reply, usage = scripts.take_with_usage("messages", path, raw, body, side=not streamed)
    model = str(body.get("model") or MODEL)
    tools = body.get("tools") if isinstance(body.get("tools"), list) else None
    for step in reply:
        if "wait" in step:
            await asyncio.sleep(float(step["wait"]))
        if "fail" in step:
            fail = step["fail"]
            return _error(int(fail["status"]), str(fail.get("message", "scripted failure")))
    blocks = content_blocks(reply, tools)
    if not blocks:
        blocks = [{"type": "text", "text": ""}]
    if not streamed:
        return JSONResponse(message(blocks, model, usage))

    async def stream() -> AsyncIterator[bytes]:
        for event, data in sse_events(blocks, model, usage):
            yield encode_sse(event, data)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache"})

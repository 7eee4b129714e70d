"""The OpenAI Responses API (``POST /v1/responses``, ``stream: true``) as Codex 0.169 consumes
it: Server-Sent Events, one ``event:`` / ``data:`` pair per event.

One scripted reply becomes one streamed response:

* ``response.created`` (``response: {id, status: "in_progress", output: []}``);
* per ``text`` (or ``message``) step: ``response.output_item.added`` (a ``message`` item, with
  the ``message`` step's ``phase``),
  ``response.output_text.delta`` (the whole text), ``response.output_item.done`` with the item
  ``{type: "message", role: "assistant", content: [{type: "output_text", text}]}``;
* per ``tool_call`` step: ``response.output_item.added`` / ``response.output_item.done`` with
  ``{type: "function_call", call_id, name, arguments: <JSON string>}`` (plus ``namespace`` when
  the step names one: Codex's sub-agent tools sit in the ``multi_agent_v1`` namespace);
* ``response.completed`` with ``usage`` (Codex reads the token counts and ends the model turn
  there; without it Codex treats the stream as cut off and retries).

``wait`` sleeps before the next step is streamed; ``fail`` answers an HTTP error instead of the
stream (Codex retries 5xx a few times, then fails the Turn). What Codex really reads was checked
against the real binary (tests/integration/test_modelserver_codex.py).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.responses import JSONResponse, Response, StreamingResponse

from scripted_model.script import Reply, Scripts

Json = dict[str, Any]


def sse(event: str, data: Json) -> bytes:
    """One SSE event: ``event`` line, one-line JSON ``data``, blank line."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _usage(usage: dict[str, int] | None, body: Json) -> Json:
    """The Responses API ``usage`` of ``script.token_usage`` (Codex reports it per response in
    ``thread/tokenUsage/updated``)."""
    if usage is None:
        n = max(1, len(json.dumps(body.get("input", ""))) // 4)
        usage = {"input_tokens": n, "cached_input_tokens": 0, "output_tokens": 1}
    return {"input_tokens": usage["input_tokens"],
            "input_tokens_details": {"cached_tokens": usage["cached_input_tokens"]},
            "output_tokens": usage["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage["input_tokens"] + usage["output_tokens"]}


def events(reply: Reply, body: Json, new_id: Any = None,
           usage: dict[str, int] | None = None) -> list[tuple[str, Json] | float]:
    """The SSE events of one reply, in order; a float is a pause (a ``wait`` step)."""
    gen = new_id or (lambda: uuid.uuid4().hex)
    rid = f"resp_{gen()}"
    model = body.get("model", "scripted")
    out: list[tuple[str, Json] | float] = []
    response: Json = {"id": rid, "object": "response", "status": "in_progress",
                      "model": model, "output": []}
    out.append(("response.created", {"type": "response.created", "response": response}))
    done: list[Json] = []
    for step in reply:
        kind, value = next(iter(step.items()))
        if kind == "wait":
            out.append(float(value))
            continue
        index = len(done)
        if kind in ("text", "message"):
            said = value if kind == "text" else value["text"]
            item: Json = {"type": "message", "id": f"msg_{gen()}", "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": said,
                                       "annotations": []}]}
            if kind == "message" and value.get("phase") is not None:
                item["phase"] = value["phase"]
            added = {**item, "status": "in_progress", "content": []}
            out.append(("response.output_item.added",
                        {"type": "response.output_item.added", "output_index": index,
                         "item": added}))
            out.append(("response.output_text.delta",
                        {"type": "response.output_text.delta", "item_id": item["id"],
                         "output_index": index, "content_index": 0, "delta": said}))
        elif kind == "tool_call":
            args = value.get("arguments", {})
            item = {"type": "function_call", "id": f"fc_{gen()}",
                    "call_id": value.get("call_id") or f"call_{gen()}",
                    "name": value["name"],
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                    "status": "completed"}
            if isinstance(value.get("namespace"), str):  # a tool of a namespace (sub-agents)
                item["namespace"] = value["namespace"]
            out.append(("response.output_item.added",
                        {"type": "response.output_item.added", "output_index": index,
                         "item": {**item, "status": "in_progress"}}))
        else:  # "fail" is answered before streaming (see handle)
            continue
        out.append(("response.output_item.done",
                    {"type": "response.output_item.done", "output_index": index, "item": item}))
        done.append(item)
    completed = {**response, "status": "completed", "output": done,
                 "usage": _usage(usage, body)}
    out.append(("response.completed", {"type": "response.completed", "response": completed}))
    return out


def failure(reply: Reply) -> Json | None:
    """The ``fail`` step of a reply, if any (the whole response is then that HTTP error)."""
    for step in reply:
        if "fail" in step:
            return dict(step["fail"])
    return None


def is_side_request(body: Json) -> bool:
    """Codex's own requests that are not the conversation (none seen in 0.169 app-server
    Turns; kept so a future title / summary call is answered without consuming a script)."""
    return body.get("stream") is False


async def handle(scripts: Scripts, path: str, raw: str, body: Json) -> Response:
    reply, usage = scripts.take_with_usage("responses", path, raw, body,
                                           side=is_side_request(body))
    fail = failure(reply)
    if fail is not None:
        waits = [float(s["wait"]) for s in reply if "wait" in s]
        if waits:
            await asyncio.sleep(sum(waits))
        return JSONResponse({"error": {"message": fail.get("message", "scripted failure"),
                                       "type": "server_error", "code": None}},
                            status_code=int(fail["status"]))
    planned = events(reply, body, usage=usage)

    async def stream() -> AsyncIterator[bytes]:
        for ev in planned:
            if isinstance(ev, float):
                await asyncio.sleep(ev)
            else:
                yield sse(*ev)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache"})

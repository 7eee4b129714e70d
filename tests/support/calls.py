"""Function calls driven through a test Runtime over the real stack — a Session, a native call,
its result submitted and delivered — and the native receipts a harness would write for them;
what the receipt tracker then decides is read as the call's one application Item."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tests.support.system import Inbox, System, TestRuntime, create

Json = dict[str, Any]


WINDOW = 10.0


TIMEOUT_REASON = "no matching native receipt within 10 s of delivery"


@dataclass
class Call:
    sid: str
    call_id: str
    delivery: Json  # the function_result delivery as the Runtime received it
    native: Json  # Claude: {"session_id"}; Codex: {"threadId", "turnId"}
    name: str

    @property
    def handed_at(self) -> float:
        return float(self.delivery["_timestamp"])


def is_app(call_id: str) -> Any:
    return lambda i: i["type"] == "function_call_application" and i["call_id"] == call_id


async def open_call(system: System, rt: TestRuntime, inbox: Inbox, *, output: Any,
                    success: bool = True, error: str | None = None) -> Call:
    """A Session of ``rt``'s harness, a native function call, its result submitted and
    delivered."""
    harness = rt.harness
    sid = await create(system, harness, "call a function, please")
    start = await inbox.next(sid)
    cid = f"call_{uuid.uuid4().hex[:12]}"
    native: Json
    if harness == "claude_code":
        native = {"session_id": f"native-{uuid.uuid4().hex[:8]}"}
        await rt.observe(sid, {"type": "assistant", "uuid": uuid.uuid4().hex,
                               "session_id": native["session_id"], "parent_tool_use_id": None,
                               "message": {"content": [{"type": "tool_use", "id": cid,
                                                        "name": "lookup", "input": {}}]}},
                         turn_id=start["turn_id"])
    else:
        native = {"threadId": f"thr_{uuid.uuid4().hex[:8]}", "turnId": "nturn_1"}
        await rt.observe(sid, {"method": "item/started", "params": {**native, "item": {
            "type": "dynamicToolCall", "id": cid, "tool": "lookup", "arguments": {}}}},
            turn_id=start["turn_id"])
    await system.items.wait_for(sid, lambda i: i["type"] == "function_call"
                                and i["call_id"] == cid)
    body: Json = {"type": "agent.session.input.tool_result", "call_id": cid,
                  "success": success, "output": output}
    if error is not None:
        body["error"] = error
    r = await system.event(sid, body)
    assert r.status_code == 202 and r.json()["delivery"] == "resumed", r.text
    d = await inbox.next(sid)
    assert (d["kind"], d["call_id"]) == ("function_result", cid)
    return Call(sid, cid, d, native, "lookup")


def claude_receipt(call: Call, **overrides: Any) -> Json:
    """The live root native tool result that matches ``call`` exactly (then ``overrides``)."""
    blocks: list[Json] = []
    for part in call.delivery["content"]:
        if part["type"] == "input_image":
            data = part["image_url"].split(",", 1)[1]
            blocks.append({"type": "image", "source": {"type": "base64",
                                                       "media_type": "image/png", "data": data}})
        else:
            blocks.append({"type": "text", "text": part["text"]})
    rec: Json = {"type": "user", "uuid": uuid.uuid4().hex, "session_id": call.native["session_id"],
                 "parent_tool_use_id": None, "isReplay": False, "isSynthetic": False,
                 "message": {"role": "user", "content": [{
                     "type": "tool_result", "tool_use_id": call.call_id,
                     "is_error": not call.delivery["success"], "content": blocks}]}}
    rec.update(overrides)
    return rec


def codex_receipt(call: Call) -> Json:
    content = [{"type": "inputImage", "imageUrl": p["image_url"]} if p["type"] == "input_image"
               else {"type": "inputText", "text": p["text"]} for p in call.delivery["content"]]
    ok = call.delivery["success"]
    return {"method": "item/completed", "params": {**call.native, "item": {
        "type": "dynamicToolCall", "id": call.call_id, "tool": call.name,
        "status": "completed" if ok else "failed", "success": ok, "contentItems": content}}}


async def at(moment: float) -> None:
    await asyncio.sleep(max(0.0, moment - time.time()))


async def only_application(system: System, call: Call, settle: float = 1.5) -> Json:
    """The call's one application Item, after giving a second one time to appear."""
    first = await system.items.wait_for(call.sid, is_app(call.call_id), timeout=WINDOW + 8)
    await asyncio.sleep(settle)
    apps = [i for i in system.items.by_session[call.sid] if is_app(call.call_id)(i)]
    assert apps == [first], apps
    assert system.http is not None
    r = await system.http.get(f"/v1/sessions/{call.sid}/tool_results/{call.call_id}")
    assert r.status_code == 200
    assert r.json()["state"] == first["state"]
    assert r.json()["application"]["reason"] == first["reason"]
    return first

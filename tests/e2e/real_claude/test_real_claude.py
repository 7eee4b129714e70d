"""Sessions on the real Claude Code (``claude`` 2.1.328, stream-json + the MCP bridge) through
Core's public surfaces; the scripted model server records what the model really received."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import uuid
from typing import Any

import httpx
import pytest

from scripted_model.server import ModelServer
from tests.support.builders import image, msg, png_data_uri, text
from tests.support.processes import Core
from tests.support.public import MESSAGE, TOOL_RESULT, stored_items, wait_item
from tests.support.system import ItemCollector

pytestmark = pytest.mark.e2e

ONLY_ROOT = "Core's public functions answer only the root agent"


async def _post(api: httpx.AsyncClient, url: str, body: dict[str, Any], ok: int
                ) -> dict[str, Any]:
    """POST with a client-minted idempotency id, retried on 503 (on this shared, loaded machine
    the broker watch may answer ``unavailable``; the id makes the retry safe)."""
    for _ in range(10):
        r = await api.post(url, json=body)
        if r.status_code != 503:
            break
        await asyncio.sleep(1.0)
    assert r.status_code == ok, r.text
    return dict(r.json())


async def create(api: httpx.AsyncClient, harness: str, input: Any, placement: str = "none"
                 ) -> dict[str, Any]:
    return await _post(api, "/v1/sessions", {
        "harness": harness, "placement": placement, "input": input,
        "client_request_id": str(uuid.uuid4())}, 201)


async def event(api: httpx.AsyncClient, sid: str, body: dict[str, Any]) -> dict[str, Any]:
    return await _post(api, f"/v1/sessions/{sid}/events",
                       {**body, "client_event_id": str(uuid.uuid4())}, 202)


def key(tag: str) -> str:
    return f"E2E-{tag}-{uuid.uuid4().hex[:10]}"


def call_step(city: str = "Paris", call_id: str | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"name": "get_weather", "arguments": {"city": city}}
    if call_id:
        step["call_id"] = call_id
    return {"tool_call": step}


def blocks_of(model: ModelServer, k: str, n: int) -> list[dict[str, Any]]:
    """Every content block of every message of the n-th model request of script ``k``."""
    out: list[dict[str, Any]] = []
    for m in model.scripts.recorded(k)[n].body["messages"]:
        c = m["content"]
        out += [{"type": "text", "text": c}] if isinstance(c, str) else c
    return out


async def open_call(capi: httpx.AsyncClient, citems: ItemCollector, model: ModelServer, k: str,
                    after: list[list[dict[str, Any]]] | None = None) -> tuple[str, str, str]:
    model.scripts.register(k, [[call_step()], *(after or [[{"text": "thanks"}]])])
    s = await create(capi, "claude_code", f"{k} what is the weather?")
    call = await wait_item(citems, s["id"], 90, type="function_call")
    assert call["name"] == "get_weather" and call["arguments"] == {"city": "Paris"}
    return s["id"], call["call_id"], s["items"][0]["turn_id"]


async def test_an_image_message_reaches_the_model_byte_for_byte(
        capi: httpx.AsyncClient, citems: ItemCollector, cmodel: ModelServer) -> None:
    k = key("img")
    uri = png_data_uri(5, 7, (1, 2, 3))
    cmodel.scripts.register(k, [[{"text": "nice picture"}]])
    s = await create(capi, "claude_code", [msg(text(k), image(uri))])
    await wait_item(citems, s["id"], 90, type="turn", state="completed")
    images = [b for b in blocks_of(cmodel, k, 0) if b.get("type") == "image"]
    assert [b["source"] for b in images] == [{
        "type": "base64", "media_type": "image/png", "data": uri.split(",", 1)[1]}]


async def test_function_result_with_an_image_confirmed_by_the_real_receipt(
        capi: httpx.AsyncClient, citems: ItemCollector, cmodel: ModelServer) -> None:
    k = key("receipt")
    sid, call_id, turn_id = await open_call(capi, citems, cmodel, k)
    uri = png_data_uri(3, 3, (9, 8, 7))
    res = await event(capi, sid, {"type": TOOL_RESULT, "call_id": call_id, "success": True,
                                  "output": [text("map:"), image(uri), text("end")]})
    assert res["delivery"] == "resumed"
    app = await wait_item(citems, sid, 30, type="function_call_application", call_id=call_id)
    assert app["state"] == "applied", app
    await wait_item(citems, sid, 90, type="turn", state="completed", turn_id=turn_id)
    [result] = [b for b in blocks_of(cmodel, k, 1) if b.get("type") == "tool_result"]
    assert result["tool_use_id"] == call_id
    assert [b["type"] for b in result["content"]] == ["text", "image", "text"]
    assert result["content"][1]["source"]["data"] == uri.split(",", 1)[1]


async def test_failed_result_confirmed_as_the_real_binary_prints_it(
        capi: httpx.AsyncClient, citems: ItemCollector, cmodel: ModelServer) -> None:
    k = key("failed")
    sid, call_id, _ = await open_call(capi, citems, cmodel, k)
    await event(capi, sid, {"type": TOOL_RESULT, "call_id": call_id, "success": False,
                            "output": "partial", "error": "boom"})
    app = await wait_item(citems, sid, 30, type="function_call_application", call_id=call_id)
    assert app["state"] == "applied", app


async def test_steering_mid_turn(
        capi: httpx.AsyncClient, citems: ItemCollector, cmodel: ModelServer) -> None:
    k = key("steer")
    cmodel.scripts.register(k, [[{"wait": 4.0}, {"text": "first"}], [{"text": "steered"}]])
    s = await create(capi, "claude_code", f"{k} start")
    sid, turn_id = s["id"], s["items"][0]["turn_id"]
    await asyncio.sleep(1.5)  # the model is still answering the first request
    st = await event(capi, sid, {"type": MESSAGE, "input": [msg(text("also this"))]})
    assert st["delivery"] == "steered" and st["items"][0]["turn_id"] == turn_id
    await wait_item(citems, sid, 90, type="turn", state="completed", turn_id=turn_id)
    reqs = cmodel.scripts.recorded(k)
    assert len(reqs) == 2
    assert "also this" in json.dumps(blocks_of(cmodel, k, 1))
    items = await stored_items(capi, sid)
    # one Turn: started once, completed once (the queued steer's intermediate result did not
    # end it early)
    turns = [i for i in items if i["type"] == "turn"]
    assert [(t["turn_id"], t["state"]) for t in turns] == [(turn_id, "started"),
                                                           (turn_id, "completed")]


# make test-slow: the 64-message bound's main proofs: test_flows.py and test_dispatcher.py
@pytest.mark.slow
async def test_the_65th_message_of_a_turn_is_refused_and_the_turn_fails(
        capi: httpx.AsyncClient, citems: ItemCollector, cmodel: ModelServer) -> None:
    k = key("bound")
    cmodel.scripts.register(k, [[{"wait": 6.0}, {"text": "slow"}]])
    s = await create(capi, "claude_code", f"{k} go")
    sid, turn_id = s["id"], s["items"][0]["turn_id"]
    many = await event(capi, sid, {"type": MESSAGE,
                                   "input": [msg(text(f"m{i}")) for i in range(63)]})
    assert many["delivery"] == "steered"
    over = await event(capi, sid, {"type": MESSAGE, "input": [msg(text("one too many"))]})
    failed = await wait_item(citems, sid, 60, type="turn", turn_id=turn_id, state="failed")
    assert "64" in failed["reason"]
    # nothing stored is lost: all 65 messages are Items, in order
    items = await stored_items(capi, sid)
    texts = [i["content"][0]["text"] for i in items if i["type"] == "message"]
    assert texts == [f"{k} go", *[f"m{i}" for i in range(63)], "one too many"]
    assert over["items"][0]["type"] == "message"
    # the refused message never reached the model
    await asyncio.sleep(8)
    assert all("one too many" not in json.dumps(r.body) for r in cmodel.scripts.recorded(k))


def _claude_pids_under(ancestor: int) -> list[int]:
    out = subprocess.run(["pgrep", "-f", "input-format stream-json"], capture_output=True,
                         text=True, check=False).stdout.split()
    return [int(p) for p in out if _is_descendant(int(p), ancestor)]


def _is_descendant(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


# make test-slow: waits out the 10 s window; the window's main proof:
# test_receipts.py::test_receipt_window
@pytest.mark.slow
async def test_uncertain_when_the_harness_process_is_killed(
        ccore: Core, capi: httpx.AsyncClient, citems: ItemCollector,
        cmodel: ModelServer) -> None:
    k = key("kill")
    sid, call_id, turn_id = await open_call(capi, citems, cmodel, k)
    mine = _claude_pids_under(ccore.procs["runtime-claude_real"].pid)
    assert mine, "no claude under the real Runtime"
    # The harness hangs (SIGSTOP): the result reaches it through the MCP bridge but is never
    # recorded; after the 10 s window the application is uncertain. Then it is killed.
    for pid in mine:
        os.kill(pid, signal.SIGSTOP)
    await event(capi, sid, {"type": TOOL_RESULT, "call_id": call_id, "success": True,
                            "output": "never recorded"})
    app = await wait_item(citems, sid, 40, type="function_call_application", call_id=call_id)
    assert app["state"] == "uncertain", app
    for pid in mine:
        os.kill(pid, signal.SIGKILL)
    failed = await wait_item(citems, sid, 40, type="turn", turn_id=turn_id, state="failed")
    assert failed["reason"]
    # the Session runs again on a fresh claude process
    k2 = key("after-kill")
    cmodel.scripts.register(k2, [[{"text": "back"}]])
    again = await event(capi, sid, {"type": MESSAGE, "input": [msg(text(k2))]})
    await wait_item(citems, sid, 90, type="turn", state="completed",
                    turn_id=again["items"][0]["turn_id"])


# make test-slow: a receipt edge on the real binary; the rule's unit proofs:
# test_claude_goldens.py and the receipt rules
@pytest.mark.slow
async def test_a_subagent_tool_result_never_confirms_a_root_call(
        ccore: Core, capi: httpx.AsyncClient, citems: ItemCollector,
        cmodel: ModelServer) -> None:
    """A subagent (Agent tool) calls the function first with the very call id the root agent
    then uses; the bridge answers the subagent's call itself, so a subagent ``tool_result``
    with that call id, is_error and exactly the text Core will be sent is printed. The root
    call's result is then never recorded (the process hangs): only a matcher that accepted
    the subagent record (parent_tool_use_id set) would call it applied."""
    k, sub = key("sub"), key("subprompt") + "-helper-prompt"
    dup = f"toolu_dup{uuid.uuid4().hex[:16]}"
    cmodel.scripts.register(k, [[{"tool_call": {"name": "Agent", "arguments": {
        "description": "helper", "subagent_type": "general-purpose",
        "run_in_background": False, "prompt": sub}}}]])
    # the subagent's requests, then the root's (its history holds the sub key too: longest)
    cmodel.scripts.register(sub, [[call_step(call_id=dup)], [{"text": "helper done"}],
                                  [call_step(call_id=dup)], [{"text": "thanks"}]])
    s = await create(capi, "claude_code", f"{k} ask a helper")
    sid = s["id"]
    call = await wait_item(citems, sid, 120, type="function_call")
    assert call["call_id"] == dup
    await asyncio.sleep(1.0)
    mine = _claude_pids_under(ccore.procs["runtime-claude_real"].pid)
    for pid in mine:
        os.kill(pid, signal.SIGSTOP)  # the root never records the result
    await event(capi, sid, {"type": TOOL_RESULT, "call_id": dup, "success": False,
                            "error": ONLY_ROOT})
    app = await wait_item(citems, sid, 40, type="function_call_application", call_id=dup)
    for pid in mine:
        os.kill(pid, signal.SIGKILL)
    assert app["state"] == "uncertain", app

"""Sessions on the real Codex (``codex app-server`` 0.169) through Core's public surfaces; the
scripted model server records what the model really received."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from typing import Any

import httpx
import pytest

from scripted_model.server import ModelServer
from tests.support.builders import image, msg, png_data_uri, text
from tests.support.processes import Core
from tests.support.public import MESSAGE, TOOL_RESULT, create, event, wait_item
from tests.support.system import ItemCollector

pytestmark = pytest.mark.e2e


def key(tag: str) -> str:
    return f"E2E-{tag}-{uuid.uuid4().hex[:10]}"


def call_step(city: str = "Paris") -> dict[str, Any]:
    return {"tool_call": {"name": "get_weather", "arguments": {"city": city}}}


def user_inputs(model: ModelServer, k: str, n: int = 0) -> list[dict[str, Any]]:
    """The user message items of the n-th model request of script ``k``."""
    body = model.scripts.recorded(k)[n].body
    return [i for i in body["input"] if i.get("type") == "message" and i.get("role") == "user"]


async def open_call(rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer, k: str,
                    after: list[list[dict[str, Any]]] | None = None) -> tuple[str, str, str]:
    model.scripts.register(k, [[call_step()], *(after or [[{"text": "thanks"}]])])
    s = await create(rapi, "codex", f"{k} what is the weather?")
    call = await wait_item(ritems, s["id"], 90, type="function_call")
    assert call["name"] == "get_weather" and call["arguments"] == {"city": "Paris"}
    return s["id"], call["call_id"], s["items"][0]["turn_id"]


async def test_function_call_confirmed_by_the_real_receipt(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    k = key("receipt")
    sid, call_id, turn_id = await open_call(rapi, ritems, model, k)
    res = await event(rapi, sid, {"type": TOOL_RESULT, "call_id": call_id, "success": False,
                                  "output": [text("partial"), image()], "error": "boom"})
    assert res["delivery"] == "resumed"
    app = await wait_item(ritems, sid, 30, type="function_call_application", call_id=call_id)
    assert app["state"] == "applied", app
    await wait_item(ritems, sid, 90, type="turn", state="completed", turn_id=turn_id)
    # the model got the result in the delivered order: output parts, then the error text
    second = model.scripts.recorded(k)[1].body["input"]
    [out] = [i for i in second if i.get("type") == "function_call_output"]
    assert out["call_id"] == call_id
    parts = out["output"]
    assert [p["type"] for p in parts] == ["input_text", "input_image", "input_text"]
    assert parts[0]["text"] == "partial" and parts[2]["text"] == "boom"


async def test_a_receipt_that_differs_from_the_result_never_confirms(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    """self_hosted: a Runtime whose adapter drops images from what it answers Codex with; the
    real item/completed then records different content, and the call stays uncertain."""
    k = key("broken")
    model.scripts.register(k, [[call_step()], [{"text": "thanks"}]])
    s = await create(rapi, "codex", f"{k} weather?", placement="self_hosted")
    sid = s["id"]
    call = await wait_item(ritems, sid, 90, type="function_call")
    await event(rapi, sid, {"type": TOOL_RESULT, "call_id": call["call_id"], "success": True,
                            "output": [image(), text("radar above")]})
    app = await wait_item(ritems, sid, 40, type="function_call_application",
                          call_id=call["call_id"])
    assert app["state"] == "uncertain", app
    assert "no matching native receipt" in app["reason"]


async def test_blank_line_flattening_reaches_the_model(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    k = key("flat")
    model.scripts.register(k, [[{"text": "read both"}]])
    s = await create(rapi, "codex", [msg(text(f"{k} first")), msg(text("second"), text(" "))])
    await wait_item(ritems, s["id"], 90, type="turn", state="completed")
    user = user_inputs(model, k)[-1]  # Codex puts its own context message first
    assert user["content"] == [{"type": "input_text", "text": f"{k} first"},
                               {"type": "input_text", "text": "\n\n"},
                               {"type": "input_text", "text": "second"},
                               {"type": "input_text", "text": " "}]


async def test_an_image_message_reaches_the_model_byte_for_byte(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    k = key("img")
    uri = png_data_uri(5, 7, (1, 2, 3))
    model.scripts.register(k, [[{"text": "nice picture"}]])
    s = await create(rapi, "codex", [msg(text(k), image(uri))])
    await wait_item(ritems, s["id"], 90, type="turn", state="completed")
    user = user_inputs(model, k)[-1]  # Codex puts its own context message first
    images = [p for p in user["content"] if p["type"] == "input_image"]
    assert [p["image_url"] for p in images] == [uri]


async def test_steering_reaches_the_running_turn(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    k = key("steer")
    model.scripts.register(k, [[{"wait": 3.0}, {"text": "first"}], [{"text": "steered"}]])
    s = await create(rapi, "codex", f"{k} start")
    sid, turn_id = s["id"], s["items"][0]["turn_id"]
    await asyncio.sleep(1.5)  # the model is still answering the first request
    st = await event(rapi, sid, {"type": MESSAGE, "input": [msg(text("also this"))]})
    assert st["delivery"] == "steered" and st["items"][0]["turn_id"] == turn_id
    await wait_item(ritems, sid, 90, type="turn", state="completed", turn_id=turn_id)
    reqs = model.scripts.recorded(k)
    assert len(reqs) == 2  # the steered input went to the model within the same Turn
    texts = [p.get("text") for u in user_inputs(model, k, 1) for p in u["content"]]
    assert "also this" in texts


async def test_uncertain_when_the_harness_process_is_killed(
        rcore: Core, rapi: httpx.AsyncClient, ritems: ItemCollector,
        model: ModelServer) -> None:
    k = key("kill")
    sid, call_id, turn_id = await open_call(rapi, ritems, model, k)
    # kill -9 the codex app-server processes of the real Runtime (its children), then submit
    runtime_pid = rcore.procs["runtime-codex_real"].pid
    mine = [pid for pid in _codex_pids() if _is_descendant(pid, runtime_pid)]
    assert mine, "no codex app-server under the real Runtime"
    for pid in mine:
        os.kill(pid, signal.SIGKILL)
    await event(rapi, sid, {"type": TOOL_RESULT, "call_id": call_id, "success": True,
                            "output": "never recorded"})
    app = await wait_item(ritems, sid, 40, type="function_call_application", call_id=call_id)
    assert app["state"] in ("uncertain", "failed"), app
    failed = await wait_item(ritems, sid, 40, type="turn", turn_id=turn_id, state="failed")
    assert failed["reason"]
    # the Session can run again: a fresh codex process
    k2 = key("after-kill")
    model.scripts.register(k2, [[{"text": "back"}]])
    again = await event(rapi, sid, {"type": MESSAGE, "input": [msg(text(k2))]})
    await wait_item(ritems, sid, 90, type="turn", state="completed",
                    turn_id=again["items"][0]["turn_id"])


def _codex_pids() -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if b"app-server" in argv and any(a.endswith(b"codex") for a in argv):
                out.append(int(entry))
    return out


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


# make test-slow: the main proofs: test_dispatcher.py (images to a text-only Runtime fail the
# Turn) and test_conformance_real_codex.py (the text-only real binary)
@pytest.mark.slow
async def test_images_refused_when_the_runtime_reports_no_image_capability(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    # openai_hosted: only the real Runtime with a text-only model (--no-images)
    k = key("noimg")
    model.scripts.register(k, [[{"text": "text only"}], [{"text": "again"}]])
    s = await create(rapi, "codex", f"{k} hi", placement="openai_hosted")
    sid, turn_id = s["id"], s["items"][0]["turn_id"]
    await wait_item(ritems, sid, 90, type="turn", state="completed", turn_id=turn_id)
    sent = await event(rapi, sid, {"type": MESSAGE, "input": [msg(text(f"{k} see"), image())]})
    failed = await wait_item(ritems, sid, 60, type="turn", state="failed",
                             turn_id=sent["items"][0]["turn_id"])
    assert "image" in failed["reason"]
    assert len(model.scripts.recorded(k)) == 1  # the image never reached the model
    assert json.dumps(model.scripts.recorded(k)[0].body).count("input_image") == 0

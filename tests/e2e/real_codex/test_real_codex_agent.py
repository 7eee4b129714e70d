"""What the real Codex's agent said, as Items (CONTRACT §2, "Public Items"): the model's text,
its function call, its answer; ``?wait=true`` answers 200 with the final answer; the Turn's end
carries the usage Codex reported (``thread/tokenUsage/updated``, summed over the Turn's model
responses)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from scripted_model.server import ModelServer
from tests.support.agent_turn import (
    ANSWER,
    COMMENTARY,
    agent_items,
    answer_and_wait,
    check_turn,
    script,
    summed_usage,
)
from tests.support.public import create, wait_item
from tests.support.system import ItemCollector

pytestmark = pytest.mark.e2e


async def test_commentary_call_and_final_answer_are_items(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    k = f"E2E-agent-{uuid.uuid4().hex[:10]}"
    model.scripts.register(k, script({"tool_call": {"name": "get_weather",
                                                       "arguments": {"city": "Paris"}}}))
    s = await create(rapi, "codex", f"{k} what is the weather in Paris?")
    sid = s["id"]
    call = await wait_item(ritems, sid, 90, type="function_call")
    stored = await answer_and_wait(rapi, ritems, sid, call["call_id"])
    end = check_turn(stored, call["call_id"])
    assert end["usage"] == summed_usage(model, k), (end["usage"], summed_usage(model, k))


async def test_a_2_mb_answer_is_one_whole_item(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    """The model answers 2 MB of text: the real Codex prints it as one agentMessage, and Core
    stores and publishes it whole — on the topic, over ``GET …/items`` and in ``?wait``."""
    k = f"E2E-big-{uuid.uuid4().hex[:10]}"
    big = ("  Paris: sunny, 21°C. 𝄞\n\n" * 90_000)[: 2 * 1024 * 1024]
    model.scripts.register(k, [[{"text": big}]])
    r = await rapi.post("/v1/sessions", params={"wait": "true", "timeout_ms": "180000"},
                        json={"harness": "codex", "placement": "none",
                              "input": f"{k} tell me everything"})
    assert r.status_code == 200, r.text[:500]
    [answer] = [i for i in r.json()["items"] if i.get("role") == "agent"]
    assert answer["content"] == [{"type": "output_text", "text": big}]
    assert answer["phase"] == "final_answer"
    published = await wait_item(ritems, r.json()["id"], 30, id=answer["id"])
    assert published["content"][0]["text"] == big


async def test_the_phase_codex_reports_is_kept(
        rapi: httpx.AsyncClient, ritems: ItemCollector, model: ModelServer) -> None:
    """The model marks its messages' phase (the Responses API ``phase``): the real Codex reports
    it on each ``agentMessage``, and the Items keep it, ``phase_source: "provider"``."""
    k = f"E2E-phase-{uuid.uuid4().hex[:10]}"
    model.scripts.register(k, [
        [{"message": {"text": COMMENTARY, "phase": "commentary"}},
         {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        [{"message": {"text": ANSWER, "phase": "final_answer"}}]])
    s = await create(rapi, "codex", f"{k} what is the weather in Paris?")
    call = await wait_item(ritems, s["id"], 90, type="function_call")
    stored = await answer_and_wait(rapi, ritems, s["id"], call["call_id"])
    assert [(a["content"][0]["text"], a["phase"], a["phase_source"])
            for a in agent_items(stored)] == [(COMMENTARY, "commentary", "provider"),
                                              (ANSWER, "final_answer", "provider")]

"""What the real Claude Code's root agent said, as Items (CONTRACT §2, "Public Items"): the
model's text, its function call, its answer; ``?wait=true`` answers 200 with the final answer;
the Turn's end carries the usage of Claude Code's ``result``; a subagent's text and the replayed
echo of our input are never agent Items."""

from __future__ import annotations

import uuid

import httpx
import pytest

from scripted_model.server import ModelServer
from tests.support.agent_turn import (
    ANSWER,
    agent_items,
    answer_and_wait,
    check_turn,
    script,
    summed_usage,
)
from tests.support.public import create, stored_items, wait_item
from tests.support.system import ItemCollector

pytestmark = pytest.mark.e2e


def key(tag: str) -> str:
    return f"E2E-{tag}-{uuid.uuid4().hex[:10]}"


async def test_commentary_call_and_final_answer_are_items(
        capi: httpx.AsyncClient, citems: ItemCollector, cmodel: ModelServer) -> None:
    k = key("agent")
    cmodel.scripts.register(k, script({"tool_call": {"name": "get_weather",
                                                     "arguments": {"city": "Paris"}}}))
    s = await create(capi, "claude_code", f"{k} what is the weather in Paris?")
    sid = s["id"]
    call = await wait_item(citems, sid, 90, type="function_call")
    stored = await answer_and_wait(capi, citems, sid, call["call_id"])
    end = check_turn(stored, call["call_id"])  # the replayed input (isReplay) made no agent Item
    # as Claude Code reports it: Anthropic's input_tokens leave out the tokens read from cache
    reported = summed_usage(cmodel, k)
    reported["input_tokens"] -= reported["cached_input_tokens"]
    assert end["usage"] == reported, (end["usage"], reported)


async def test_a_2_mb_answer_is_one_whole_item(
        capi: httpx.AsyncClient, citems: ItemCollector, cmodel: ModelServer) -> None:
    """The model answers 2 MB of text (issue 56, "Large answers"): the real Claude Code prints
    it as one root ``assistant`` text block, and Core stores and publishes it whole — on the
    topic, over ``GET …/items`` and in ``?wait``."""
    k = key("big")
    big = ("  Paris: sunny, 21°C. 𝄞\n\n" * 90_000)[: 2 * 1024 * 1024]
    cmodel.scripts.register(k, [[{"text": big}]])
    r = await capi.post("/v1/sessions", params={"wait": "true", "timeout_ms": "180000"},
                        json={"harness": "claude_code", "placement": "none",
                              "input": f"{k} tell me everything"})
    assert r.status_code == 200, r.text[:500]
    [answer] = [i for i in r.json()["items"] if i.get("role") == "agent"]
    assert answer["content"] == [{"type": "output_text", "text": big}]
    assert answer["phase"] == "final_answer"
    published = await wait_item(citems, r.json()["id"], 30, id=answer["id"])
    assert published["content"][0]["text"] == big
    [stored] = [i for i in await stored_items(capi, r.json()["id"]) if i["id"] == answer["id"]]
    assert stored["content"][0]["text"] == big


async def test_a_subagents_text_is_not_an_item(
        capi: httpx.AsyncClient, citems: ItemCollector, cmodel: ModelServer) -> None:
    k, sub = key("sub"), key("subprompt") + "-helper-prompt"
    cmodel.scripts.register(k, [[{"text": "Asking a helper."}, {"tool_call": {
        "name": "Agent", "arguments": {"description": "helper",
                                       "subagent_type": "general-purpose",
                                       "run_in_background": False, "prompt": sub}}}]])
    # the subagent's request, then the root's (its history holds the sub key too: longest)
    cmodel.scripts.register(sub, [[{"text": "SUBAGENT TEXT, never an Item"}], [{"text": ANSWER}]])
    s = await create(capi, "claude_code", f"{k} ask a helper")
    sid = s["id"]
    await wait_item(citems, sid, 120, type="turn", state="completed")
    stored = await stored_items(capi, sid)
    agents = agent_items(stored)
    assert [(a["content"][0]["text"], a["phase"]) for a in agents] == [
        ("Asking a helper.", "commentary"), (ANSWER, "final_answer")], agents
    assert "SUBAGENT TEXT" not in str(stored)
    assert len(cmodel.scripts.recorded(sub)) == 2  # the subagent did speak

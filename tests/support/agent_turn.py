"""The agent's side of a Turn on a real harness, checked the same way for Codex and Claude Code
(tests/e2e/real_codex, tests/e2e/real_claude): the model says some text, calls the function,
then answers; the Items must hold both texts exactly, commentary then final answer, around the
function call, and the Turn's end the usage the scripted model reported."""

from __future__ import annotations

from typing import Any

import httpx

from scripted_model.server import ModelServer
from tests.support.public import TOOL_RESULT, stored_items, wait_item
from tests.support.system import ItemCollector

Json = dict[str, Any]
COMMENTARY = "Let me check the weather for you."
# blank lines inside, leading and trailing spaces: kept exactly
ANSWER = "  It is sunny in Paris, 21°C.\n\n\nEnjoy the afternoon!  "


def script(harness_tool_step: Json) -> list[list[Json]]:
    return [[{"text": COMMENTARY}, harness_tool_step], [{"text": ANSWER}]]


def agent_items(items: list[Json]) -> list[Json]:
    return [i for i in items if i["type"] == "message" and i["role"] == "agent"]


def summed_usage(model: ModelServer, k: str) -> Json:
    reqs = [r for r in model.scripts.recorded(k) if not r.side]
    return {f: sum(r.usage[f] for r in reqs)
            for f in ("input_tokens", "output_tokens", "cached_input_tokens")}


async def answer_and_wait(api: httpx.AsyncClient, items: ItemCollector, sid: str,
                          call_id: str) -> list[Json]:
    """Submit the function's result with ``?wait=true``: 200 with the Turn's Items, its final
    answer among them. Returns the Session's stored Items."""
    r = await api.post(f"/v1/sessions/{sid}/events",
                       json={"type": TOOL_RESULT, "call_id": call_id, "success": True,
                             "output": "sunny, 21°C"},
                       params={"wait": "true", "timeout_ms": "120000"})
    assert r.status_code == 200, r.text
    waited = r.json()["items"]
    [final] = [i for i in agent_items(waited) if i["phase"] == "final_answer"]
    assert final["content"] == [{"type": "output_text", "text": ANSWER}]
    assert waited[0]["type"] == "function_call_output"
    assert [i for i in waited if i["type"] == "turn"][-1]["state"] == "completed"
    await wait_item(items, sid, 30, type="function_call_application", call_id=call_id)
    return await stored_items(api, sid)


def check_turn(stored: list[Json], call_id: str) -> Json:
    """Two agent Items with exactly the model's texts, commentary then final answer, in sequence
    order around the function call and its result; returns the Turn's end Item."""
    agents = agent_items(stored)
    assert [(a["content"], a["phase"], a["phase_source"]) for a in agents] == [
        ([{"type": "output_text", "text": COMMENTARY}], "commentary", "derived"),
        ([{"type": "output_text", "text": ANSWER}], "final_answer", "derived")], agents
    seq = {(i["type"], i.get("phase")): i["sequence"] for i in stored
           if i["type"] != "turn" and i.get("role") != "user"}
    assert (seq[("message", "commentary")] < seq[("function_call", None)]
            < seq[("function_call_output", None)] < seq[("message", "final_answer")]), seq
    [end] = [i for i in stored if i["type"] == "turn" and i["state"] == "completed"]
    assert end["sequence"] > seq[("message", "final_answer")]
    assert {a["turn_id"] for a in agents} == {end["turn_id"]}
    assert [i["sequence"] for i in stored] == list(range(1, len(stored) + 1))
    return end

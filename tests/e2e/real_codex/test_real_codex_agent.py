"""What the real Codex's agent said, as Items (CONTRACT §2, "Public Items"): the model's text,
its function call, its answer; ``?wait=true`` answers 200 with the final answer; the Turn's end
carries the usage Codex reported (``thread/tokenUsage/updated``, summed over the Turn's model
responses)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from services.modelserver.server import ModelServer
from tests.support.agent_turn import answer_and_wait, check_turn, script, summed_usage
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

"""A Turn the dispatcher fails ends natively too (issue 57 item 8): a steer with an image into
the running Turn of a real Codex whose model is text-only (placement ``openai_hosted``,
``--no-images``) fails Core's Turn, and the dispatcher tells the Runtime to interrupt it
(``kind: "interrupt"``). The real ``codex app-server`` ends the native Turn (``turn/interrupt``
→ ``turn/completed`` ``interrupted``) before the scripted model's function call arrives, so no
call lands on the failed Turn (docs/runtime-boundary.md)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer

from scripted_model.server import ModelServer
from shared.kafka import assigned_consumer, decode
from shared.topics import topics_for
from tests.support.builders import image, msg, text
from tests.support.processes import Core
from tests.support.public import MESSAGE, create, event, stored_items, wait_item
from tests.support.system import ItemCollector

pytestmark = pytest.mark.e2e

MODEL_WAIT_S = 10.0  # the model's first answer (a function call) comes this late


async def _native_end(obs: AIOKafkaConsumer, sid: str, turn_id: str) -> dict[str, Any]:
    """The ``turn/completed`` the Runtime forwarded for Core Turn ``turn_id``."""
    while True:
        for recs in (await obs.getmany(timeout_ms=500)).values():
            for r in recs:
                rec = decode(r.value)
                native = rec.get("native") or {}
                if (rec.get("session_id") == sid and rec.get("turn_id") == turn_id
                        and native.get("method") == "turn/completed"):
                    return rec


# make test-slow: the real binary's interrupt; the Turn's failure itself: test_dispatcher.py
@pytest.mark.slow
async def test_a_steer_the_dispatcher_fails_interrupts_the_native_turn(
        rcore: Core, rapi: httpx.AsyncClient, ritems: ItemCollector,
        model: ModelServer) -> None:
    k = f"E2E-interrupt-{uuid.uuid4().hex[:10]}"
    model.scripts.register(k, [
        [{"wait": MODEL_WAIT_S}, {"tool_call": {"name": "get_weather",
                                                "arguments": {"city": "Paris"}}}],
        [{"text": "thanks"}]])
    obs = await assigned_consumer(rcore.settings,
                                  topics_for(rcore.settings).runtime_observations, at_end=True)
    try:
        s = await create(rapi, "codex", f"{k} what is the weather?", placement="openai_hosted")
        sid, turn_id = s["id"], s["items"][0]["turn_id"]
        # the native Turn is running: Codex has sent the model its first request
        deadline = time.monotonic() + 60
        while not model.scripts.recorded(k):
            assert time.monotonic() < deadline, "the model never got the Turn's request"
            await asyncio.sleep(0.1)
        asked = time.monotonic()
        st = await event(rapi, sid, {"type": MESSAGE,
                                     "input": [msg(text(f"{k} and this?"), image())]})
        assert st["delivery"] == "steered" and st["items"][0]["turn_id"] == turn_id
        failed = await wait_item(ritems, sid, 30, type="turn", state="failed", turn_id=turn_id)
        assert failed["reason"].startswith("message_images_unsupported"), failed
        # Codex ended the native Turn (interrupted), reported under Core's Turn id
        end = await asyncio.wait_for(_native_end(obs, sid, turn_id), 30)
        assert end["native"]["params"]["turn"]["status"] == "interrupted", end["native"]
        assert time.monotonic() - asked < MODEL_WAIT_S, "ended only after the model answered"
    finally:
        await obs.stop()
    # past the moment the model answered with its call: no call reached Core
    await asyncio.sleep(max(0.0, asked + MODEL_WAIT_S + 3 - time.monotonic()))
    stored = await stored_items(rapi, sid)
    assert [i for i in stored if i["type"] == "function_call"] == [], stored
    assert [(i["type"], i.get("state")) for i in stored if i["type"] == "turn"] == [
        ("turn", "started"), ("turn", "failed")]
    assert len(model.scripts.recorded(k)) == 1  # the image never reached the model

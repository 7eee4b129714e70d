"""The public surfaces as the end-to-end tests speak them: the HTTP API with its API key, the
Items read on ``session.items``, SSE blocks, and ``runtime.control`` (the reference Runtime's
documented switch topic) with its acknowledgement."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from runtimes.switches import Switches
from shared.kafka import assigned_consumer, decode, encode
from shared.topics import topics_for
from tests.support.processes import Core
from tests.support.system import ItemCollector

API_KEY = "e2e-key"


class Control:
    """Sets the reference Runtimes' misbehaviour switches over `runtime.control` and waits for
    the acknowledgement: the Runtime re-registers on `runtime.registrations` with the switches
    in force (runtimes/app.py), so a test never runs against the old state."""

    ACK_TIMEOUT_S = 30.0

    def __init__(self, core: Core, producer: AIOKafkaProducer) -> None:
        self.core = core
        self.producer = producer
        self.topic = topics_for(core.settings).runtime_control
        self.state: dict[str, Switches] = {}

    async def set(self, runtime: str, **switches: Any) -> None:
        rid = self.core.runtime_ids[runtime]
        want = self.state.get(runtime, Switches()).updated(switches)
        regs = await assigned_consumer(self.core.settings,
                                       topics_for(self.core.settings).runtime_registrations,
                                       at_end=True)
        try:
            await self.producer.send_and_wait(
                self.topic, encode({"schema": "runtime.control/1", "runtime_id": rid,
                                    "set": switches}), key=rid.encode())
            await asyncio.wait_for(self._ack(regs, rid, want.active()), self.ACK_TIMEOUT_S)
        finally:
            await regs.stop()
        self.state[runtime] = want

    @staticmethod
    async def _ack(regs: AIOKafkaConsumer, rid: str, active: dict[str, Any]) -> None:
        """Until a registration of ``rid`` published after the control record reports
        exactly ``active``."""
        while True:
            batches = await regs.getmany(timeout_ms=500)
            for recs in batches.values():
                for r in recs:
                    reg = decode(r.value)
                    if reg.get("runtime_id") == rid and reg.get("switches") == active:
                        return


def sse_events(raw: str) -> list[tuple[str, Any]]:
    out = []
    for block in raw.split("\n\n"):
        ev, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                ev = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
        if ev:
            out.append((ev, data))
    return out


TOOL_RESULT = "agent.session.input.tool_result"


MESSAGE = "agent.session.input.message"


async def create(api: httpx.AsyncClient, harness: str, input: Any, placement: str = "none",
                 **extra: Any) -> dict[str, Any]:
    r = await api.post("/v1/sessions", json={"harness": harness, "placement": placement,
                                             "input": input, **extra})
    assert r.status_code == 201, r.text
    return dict(r.json())


async def event(api: httpx.AsyncClient, sid: str, body: dict[str, Any], status: int = 202,
                **params: Any) -> dict[str, Any]:
    r = await api.post(f"/v1/sessions/{sid}/events", json=body, params=params)
    assert r.status_code == status, r.text
    return dict(r.json())


async def wait_item(items: ItemCollector, sid: str, timeout: float = 30, **match: Any
                    ) -> dict[str, Any]:
    return await items.wait_for(
        sid, lambda i: all(i.get(k) == v for k, v in match.items()), timeout)


async def stored_items(api: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    after = 0
    while True:
        r = await api.get(f"/v1/sessions/{sid}/items", params={"after": after, "limit": 2})
        assert r.status_code == 200
        page = r.json()
        out += page["items"]
        if not page["has_more"]:
            return out
        after = page["next_after"]


async def opened_call(api: httpx.AsyncClient, items: ItemCollector, harness: str, placement: str,
                name: str = "lookup") -> tuple[str, str, str]:
    s = await create(api, harness, f'please call {name} {{"q": 1}}', placement=placement)
    call = await wait_item(items, s["id"], type="function_call")
    assert call["name"] == name and call["arguments"] == {"q": 1}
    return s["id"], call["call_id"], s["items"][0]["turn_id"]

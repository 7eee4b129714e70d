"""The broker goes away (``kill -9``) for longer than the heartbeat timeout and comes back.

While it is away no heartbeat can reach the dispatcher, and the dispatcher cannot read
``runtime.registrations`` either: that silence says nothing about the Runtimes. A live Runtime
keeps its Session and its running Turn; a Runtime that died while the broker was away is
declared gone one heartbeat timeout after the dispatcher reads the registrations again."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.skips import unavailable
from tests.support.stack import Stack
from tests.support.system import Beat, System, SystemFactory, TestRuntime, until

pytestmark = pytest.mark.faults

HEARTBEAT_TIMEOUT_S = 4.0
OUTAGE_S = 3 * HEARTBEAT_TIMEOUT_S  # well past the timeout, counted from the last heartbeat
Json = dict[str, Any]


@pytest.fixture
async def system(make_system: SystemFactory, stack: Stack) -> System:
    if not stack.controllable:
        unavailable(f"cannot stop the broker of a {stack.kind} stack")
    return await make_system(binding_wait_timeout_s=60.0,
                             runtime_heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S)


async def binding(system: System, sid: str) -> Json:
    doc = await system.dispatcher.repo.binding(sid)
    assert doc is not None
    return doc


def heartbeat_read_after(system: System, runtime_id: str, t: datetime) -> Callable[[], Any]:
    async def probe() -> bool:
        rt = system.dispatcher.registry.runtimes.get(runtime_id)
        return rt is not None and rt.heartbeat_at > t
    return probe


async def outage(stack: Stack) -> datetime:
    """Kill the broker, keep it away for ``OUTAGE_S``, start it; the moment it is ready."""
    await asyncio.to_thread(stack.stop, "kafka", True)
    await asyncio.sleep(OUTAGE_S)  # the fault's length, not a wait for a condition
    await asyncio.to_thread(stack.start, "kafka")
    return datetime.now(UTC)


async def test_a_broker_outage_does_not_make_live_runtimes_gone(system: System,
                                                                stack: Stack) -> None:
    live = await TestRuntime(system.settings, "codex").start(heartbeat=False)
    dies = await TestRuntime(system.settings, "claude_code").start(heartbeat=False)
    system.runtimes += [live, dies]
    beats = [Beat(live), Beat(dies)]
    try:
        r = await system.create("codex", "work through the outage")
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        d = await live.next_delivery(timeout=20)
        assert (d["session_id"], d["kind"]) == (sid, "start")
        r = await system.create("claude_code", "its runtime dies in the outage")
        assert r.status_code == 201, r.text
        lost_sid = r.json()["id"]
        lost = await dies.next_delivery(timeout=20)
        assert lost["session_id"] == lost_sid

        await beats[1].close()  # ``dies`` stops heartbeating: it dies with the broker away
        back = await outage(stack)

        # the live Runtime is heard again; its Session is still bound to it
        await until(heartbeat_read_after(system, live.runtime_id, back), bool, timeout=30)
        b = await binding(system, sid)
        assert (b["runtime_id"], b["status"]) == (live.runtime_id, "bound"), b

        # the dead one is declared gone a heartbeat timeout after the broker came back, not
        # at once (its last heartbeat is far older than the timeout), and not never
        fail = await system.items.wait_for(
            lost_sid, lambda i: i["type"] == "turn" and i["state"] == "failed", timeout=30)
        assert fail["reason"] == f"runtime {dies.runtime_id} is gone"
        failed_at = datetime.fromisoformat(fail["created_at"].replace("Z", "+00:00"))
        assert (failed_at - back).total_seconds() >= HEARTBEAT_TIMEOUT_S - 1.0, (failed_at, back)

        # the live Runtime's Turn ends as it reports, and nothing failed it
        await live.observe(sid, {"method": "turn/completed", "params": {
            "threadId": "thr_1", "turnId": "nt_1", "status": "completed"}},
            turn_id=d["turn_id"])
        await system.items.wait_for(sid, lambda i: i["type"] == "turn"
                                    and i["turn_id"] == d["turn_id"]
                                    and i["state"] == "completed", timeout=30)
        ends = [i for i in system.items.by_session[sid]
                if i["type"] == "turn" and i["state"] != "started"]
        assert [i["state"] for i in ends] == ["completed"], ends
        b = await binding(system, sid)
        assert (b["runtime_id"], b["status"]) == (live.runtime_id, "bound"), b
    finally:
        for beat in beats:
            await beat.close()

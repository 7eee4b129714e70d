"""The dispatcher over the real stack: test Runtimes register over Kafka,
Sessions go through HTTP → admission → storage → dispatcher, and the test watches what each
Runtime receives, the Session's binding on ``GET /v1/sessions/{id}`` and the public Items.

Harnesses are used to keep scenarios apart: a codex Session can only bind to a codex Runtime, so
a test may hold Runtimes of another harness without disturbing the one it checks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from runtimes.app import RuntimeConfig, RuntimeService
from services.dispatcher.domain.binding import RuntimeInfo
from shared.domain.wire import REFUSAL_TURN_BOUND_EXCEEDED
from shared.kafka import decode
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.builders import image, msg, png_data_uri, text
from tests.support.system import (
    QUIET_S,
    Beat,
    System,
    SystemFactory,
    TestRuntime,
    create,
    items,
    ts,
    until,
)

pytestmark = pytest.mark.integration

Json = dict[str, Any]


# ---- helpers -----------------------------------------------------------------------------

@pytest.fixture
async def short_wait_system(make_system: SystemFactory) -> System:
    """Like ``system`` but a Session waits at most 3 s for an eligible Runtime."""
    return await make_system(binding_wait_timeout_s=3.0)


async def quiet_runtime(system: System, harness: str, **kw: Any) -> tuple[TestRuntime, Beat]:
    rt = await TestRuntime(system.settings, harness, **kw).start(heartbeat=False)
    system.runtimes.append(rt)
    return rt, Beat(rt)


async def assert_no_delivery(rt: TestRuntime, seconds: float = QUIET_S) -> None:
    await asyncio.sleep(seconds)
    assert rt.deliveries.empty(), f"unexpected delivery: {rt.deliveries.get_nowait()}"


async def view(system: System, sid: str) -> Json:
    assert system.http is not None
    r = await system.http.get(f"/v1/sessions/{sid}")
    assert r.status_code == 200, r.text
    body: Json = r.json()
    return body


async def send(system: System, sid: str, messages: list[Json], expect: str) -> None:
    r = await system.event(sid, {"type": "agent.session.input.message", "input": messages})
    assert r.status_code == 202, r.text
    assert r.json()["delivery"] == expect, r.json()


def failed_turn(turn_id: str | None = None) -> Callable[[Json], bool]:
    return lambda i: (i["type"] == "turn" and i["state"] == "failed"
                      and (turn_id is None or i["turn_id"] == turn_id))


# ---- binding by reported capability ---------------------------------------------------------

async def test_image_session_binds_only_to_a_message_image_runtime(system: System) -> None:
    blind = await system.runtime("codex", message_images=False, function_result_images=True)
    content = [text("what is in this picture?"), image(png_data_uri(5, 5))]
    sid = await create(system, "codex", [msg(*content)])

    # The only ready codex Runtime does not report message images: nothing is delivered and the
    # Session waits visibly, saying why.
    await assert_no_delivery(blind)
    s = await until(lambda: view(system, sid), lambda v: v["binding"] is not None)
    assert s["status"] == "waiting_for_runtime"
    assert s["runtime_id"] is None
    assert s["binding"]["runtime_id"] is None
    assert s["binding"]["reason"] == ("waiting for a ready codex Runtime on placement none "
                                      "with message image support")

    # A capable Runtime registers: the Session binds to it at once and its input arrives there.
    capable = await system.runtime("codex", message_images=True, function_result_images=False)
    d = await capable.next_delivery(timeout=10)
    assert d["kind"] == "start" and d["session_id"] == sid
    assert d["messages"] == [{"role": "user", "content": content}]
    s = await until(lambda: view(system, sid), lambda v: v["status"] == "bound")
    assert s["runtime_id"] == capable.runtime_id
    assert s["binding"]["runtime_id"] == capable.runtime_id
    assert s["binding"]["reason"] is None
    assert blind.deliveries.empty()


async def test_claude_runtime_with_bridge_protocol_2_is_never_used(system: System) -> None:
    old = await system.runtime("claude_code", bridge_protocol=2)
    sid = await create(system, "claude_code", "hello")
    await assert_no_delivery(old)
    s = await view(system, sid)
    assert s["status"] == "waiting_for_runtime" and s["runtime_id"] is None

    current = await system.runtime("claude_code", bridge_protocol=3)
    d = await current.next_delivery(timeout=10)
    assert (d["session_id"], d["kind"]) == (sid, "start")
    s = await until(lambda: view(system, sid), lambda v: v["status"] == "bound")
    assert s["runtime_id"] == current.runtime_id

    # Later Sessions go to protocol 3 too, however the load is spread.
    sid2 = await create(system, "claude_code", "again")
    d2 = await current.next_delivery(timeout=10)
    assert d2["session_id"] == sid2
    await assert_no_delivery(old, 1.0)


async def test_draining_runtime_keeps_its_sessions_and_takes_no_new_one(system: System) -> None:
    rt, beat = await quiet_runtime(system, "codex")
    try:
        s1 = await create(system, "codex", "first")
        assert (await rt.next_delivery(timeout=10))["session_id"] == s1

        await beat.set("draining")
        await until(lambda: _status(system, rt.runtime_id), lambda v: v["status"] == "draining")
        s2 = await create(system, "codex", "second")
        await assert_no_delivery(rt)
        assert (await view(system, s2))["status"] == "waiting_for_runtime"

        # Its own Session still gets its input.
        await send(system, s1, [msg(text("more"))], "steered")
        d = await rt.next_delivery(timeout=10)
        assert (d["session_id"], d["kind"]) == (s1, "steer")

        ready = await system.runtime("codex")
        d2 = await ready.next_delivery(timeout=10)
        assert (d2["session_id"], d2["kind"]) == (s2, "start")
        v2 = await until(lambda: view(system, s2), lambda v: v["status"] == "bound")
        assert v2["runtime_id"] == ready.runtime_id
        assert (await view(system, s1))["runtime_id"] == rt.runtime_id
        assert rt.deliveries.empty()
    finally:
        await beat.close()


async def _status(system: System, runtime_id: str) -> Json:
    rt = system.dispatcher.registry.runtimes.get(runtime_id)
    return {"status": rt.status if rt else None}


async def test_gone_runtime_sessions_are_rebound(system: System) -> None:
    """Two ways to be gone: a ``gone`` registration (codex) and missed heartbeats (claude)."""

    async def scenario(harness: str, explicit: bool) -> None:
        first = await system.runtime(harness)
        sid = await create(system, harness, "work")
        d = await first.next_delivery(timeout=10)
        assert d["session_id"] == sid
        second = await system.runtime(harness)
        await first.stop(gone=explicit)
        system.runtimes.remove(first)

        # The running Turn on the lost Runtime fails with the reason, the Session moves.
        fail = await system.items.wait_for(sid, failed_turn(d["turn_id"]), timeout=15)
        assert fail["reason"] == f"runtime {first.runtime_id} is gone"
        v = await until(lambda: view(system, sid),
                        lambda v: v["binding"]["runtime_id"] == second.runtime_id)
        assert (v["status"], v["runtime_id"]) == ("bound", second.runtime_id)

        await send(system, sid, [msg(text("continue"))], "started")
        d2 = await second.next_delivery(timeout=10)
        assert (d2["session_id"], d2["kind"]) == (sid, "start")
        assert d2["messages"] == [{"role": "user", "content": [text("continue")]}]

    await asyncio.gather(scenario("codex", True), scenario("claude_code", False))


async def test_no_eligible_runtime_within_the_wait_fails_the_turn(
        short_wait_system: System) -> None:
    system = short_wait_system
    # Present but not eligible: wrong placement.
    await system.runtime("codex", placements=("self_hosted",))
    t0 = time.time()
    r = await system.create("codex", "anyone there?", placement="openai_hosted")
    assert r.status_code == 201, r.text
    sid, turn = r.json()["id"], r.json()["items"][-1]
    assert turn["type"] == "turn" and turn["state"] == "started"
    fail = await system.items.wait_for(sid, failed_turn(turn["turn_id"]), timeout=15)
    assert fail["reason"] == ("no eligible Runtime within 3 s: waiting for a ready codex "
                              "Runtime on placement openai_hosted")
    assert 3.0 <= ts(fail) - t0 < 6.0, ts(fail) - t0
    assert (await view(system, sid))["status"] == "waiting_for_runtime"
    # The input is still readable; nothing was delivered later either.
    got = await items(system, sid)
    assert [i["type"] for i in got] == ["message", "turn", "turn"]
    assert got[0]["content"] == [text("anyone there?")]


# ---- capability checks at delivery ------------------------------------------------------------

async def test_message_with_images_to_a_runtime_without_message_images_fails_the_turn(
        system: System) -> None:
    rt = await system.runtime("codex", message_images=False, function_result_images=True)
    sid = await create(system, "codex", "text first")
    d = await rt.next_delivery(timeout=10)
    assert d["kind"] == "start"
    reason = (f"message_images_unsupported: runtime {rt.runtime_id} does not report message "
              "image support; the input carries images")
    uri = png_data_uri(7, 2, (1, 2, 3))
    sent = [text("and this?"), image(uri), text("")]

    # Steering input with an image: a running native Turn cannot move to another Runtime.
    await send(system, sid, [msg(*sent)], "steered")
    fail = await system.items.wait_for(sid, failed_turn(d["turn_id"]))
    assert fail["reason"] == reason
    # … and the Runtime, which runs that Turn natively, is told to end it (issue 57 item 8)
    stop = await rt.next_delivery(timeout=10)
    assert (stop["kind"], stop["turn_id"], stop["reason"]) == ("interrupt", d["turn_id"], reason)
    # A new Turn that opens with an image is re-bound before it starts; with
    # no Runtime reporting message images it waits, then fails after the binding wait.
    await send(system, sid, [msg(image(uri))], "started")
    got = await until(lambda: _as_view(items(system, sid)),
                      lambda v: sum(map(failed_turn(), v["items"])) == 2, timeout=30)
    fails = [i for i in got["items"] if failed_turn()(i)]
    assert fails[1]["turn_id"] != d["turn_id"]
    assert fails[1]["reason"] == (
        "no eligible Runtime within 8 s: waiting for a ready codex Runtime on placement none "
        "with message image support")
    await assert_no_delivery(rt, 1.0)

    # The stored input is intact and readable, byte for byte.
    messages = [i["content"] for i in got["items"] if i["type"] == "message"]
    assert messages == [[text("text first")], sent, [image(uri)]]


async def test_image_turn_on_a_text_only_binding_rebinds_before_the_turn_starts(
        system: System) -> None:
    """Binding looks at every Turn's opening input, not only the creation input. A Session
    created text-only and bound to a Runtime without message images, whose next Turn opens with an
    image, is re-bound before that Turn starts, to a Runtime that reports message images; from
    then on it needs them (docs/runtime-boundary.md, "Images that arrive after binding")."""
    blind = await system.runtime("codex", message_images=False, function_result_images=True)
    sid = await create(system, "codex", "text only, for now")
    first = await blind.next_delivery(timeout=20)
    assert first["kind"] == "start"
    seeing = await system.runtime("codex", message_images=True, function_result_images=True)
    await blind.observe(sid, {"method": "turn/completed", "params": {
        "threadId": "thr_1", "turnId": "nt_1", "status": "completed"}}, turn_id=first["turn_id"])
    await system.items.wait_for(sid, lambda i: i["type"] == "turn"
                                and i["turn_id"] == first["turn_id"] and i["state"] == "completed")

    sent = [msg(text("and this picture?"), image(png_data_uri(6, 4, (4, 5, 6))))]
    await send(system, sid, sent, "started")
    d = await seeing.next_delivery(timeout=20)
    assert (d["kind"], d["messages"]) == ("start", sent)
    assert d["turn_id"] != first["turn_id"]
    await assert_no_delivery(blind, 1.0)
    v = await until(lambda: view(system, sid),
                    lambda v: (v["binding"] or {}).get("runtime_id") == seeing.runtime_id)
    assert v["binding"]["runtime_id"] == seeing.runtime_id
    assert not [i for i in await items(system, sid) if failed_turn()(i)]
    # The Session now needs message images: a text-only Turn stays on the seeing Runtime.
    doc = await system.dispatcher.repo.binding(sid)
    assert doc is not None and doc["needs_images"] is True


async def _as_view(coro: Awaitable[list[Json]]) -> Json:
    return {"items": await coro}


async def test_function_result_with_images_to_a_runtime_without_result_images_fails(
        system: System) -> None:
    rt = await system.runtime("codex", message_images=True, function_result_images=False)
    sid = await create(system, "codex", "use tools")
    d = await rt.next_delivery(timeout=10)
    for cid in ("call_text", "call_img"):
        await rt.observe(sid, {"method": "item/started", "params": {
            "threadId": "thr_1", "turnId": "nt_1", "item": {
                "type": "dynamicToolCall", "id": cid, "tool": "shot", "arguments": {}}}},
            turn_id=d["turn_id"])
        await system.items.wait_for(sid, lambda i, c=cid: i["type"] == "function_call"  # type: ignore[misc]
                                    and i["call_id"] == c)

    # A text-only result to the same Runtime is delivered: only image-bearing results check.
    r = await system.event(sid, {"type": "agent.session.input.tool_result",
                                 "call_id": "call_text", "success": False, "output": "partial",
                                 "error": "boom"})
    assert r.status_code == 202 and r.json()["delivery"] == "resumed", r.text
    dt = await rt.next_delivery(timeout=10)
    assert (dt["kind"], dt["call_id"]) == ("function_result", "call_text")
    assert dt["content"] == [text("partial"), text("boom")]
    assert dt["success"] is False and dt["name"] == "shot"

    output = [text("the screen:"), image(png_data_uri(3, 3)), text("end")]
    r = await system.event(sid, {"type": "agent.session.input.tool_result",
                                 "call_id": "call_img", "success": True, "output": output})
    assert r.status_code == 202 and r.json()["delivery"] == "resumed", r.text
    reason = (f"function_result_images_unsupported: runtime {rt.runtime_id} does not report "
              "function-result image support; the result carries images")
    app = await system.items.wait_for(sid, lambda i: i["type"] == "function_call_application"
                                      and i["call_id"] == "call_img")
    assert (app["state"], app["reason"]) == ("failed", reason)
    fail = await system.items.wait_for(sid, failed_turn(d["turn_id"]))
    assert fail["reason"] == reason
    # the result is not delivered; the Runtime is told to end the Turn that waits for it
    stop = await rt.next_delivery(timeout=10)
    assert (stop["kind"], stop["turn_id"], stop["reason"]) == ("interrupt", d["turn_id"], reason)
    await assert_no_delivery(rt, 1.0)

    assert system.http is not None
    got = (await system.http.get(f"/v1/sessions/{sid}/tool_results/call_img")).json()
    assert got["submission"] == {"call_id": "call_img", "success": True, "output": output}
    assert got["state"] == "failed" and got["application"]["reason"] == reason
    outs = [i for i in await items(system, sid) if i["type"] == "function_call_output"
            and i["call_id"] == "call_img"]
    assert len(outs) == 1 and outs[0]["output"] == output and outs[0]["error"] is None
    apps = [i for i in system.items.by_session[sid] if i["type"] == "function_call_application"
            and i["call_id"] == "call_img"]
    assert len(apps) == 1


# ---- the Claude Code 64-message bound -------------------------------------------------------

class Observations:
    """Every ``runtime.observations`` record of the test's topics, by Core session_id."""

    def __init__(self, settings: Settings) -> None:
        self.consumer = AIOKafkaConsumer(
            topics_for(settings).runtime_observations,
            bootstrap_servers=settings.kafka_bootstrap_servers,
            group_id=f"test-obs-{uuid.uuid4().hex[:8]}", auto_offset_reset="earliest")
        self.by_session: dict[str, list[Json]] = defaultdict(list)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Observations:
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        async for r in self.consumer:
            rec = decode(r.value)
            self.by_session[str(rec.get("session_id"))].append(rec)

    async def wait_for(self, sid: str, pred: Callable[[Json], bool], timeout: float = 20
                       ) -> Json:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in self.by_session[sid]:
                if pred(rec):
                    return rec
            await asyncio.sleep(0.05)
        raise AssertionError(f"no such observation for {sid} within {timeout} s; "
                             f"saw {self.by_session[sid][-3:]}")

    async def close(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()


async def test_claude_64_bound_refused_by_the_bridge_which_ends_the_native_turn(
        system: System) -> None:
    """Seed 000: "Within one native Turn the bridge accepts at most 64 user messages, including
    the opening prompt; it rejects a steering batch that would exceed the bound before
    submitting any part of it, which ends the running Turn." Core delivers the steer; the
    reference Runtime's bridge refuses it whole (code ``turn_message_bound_exceeded``) and ends
    its native Turn, releasing the call it had pending; Core's Turn ends ``failed`` from that
    observed end, and no later function call is attributed to it."""
    rt = RuntimeService(system.settings, RuntimeConfig(
        runtime_id=f"rt_{uuid.uuid4().hex}", harness="claude_code", placements=["none"],
        heartbeat_s=1.0, turn_idle_s=120.0))
    obs = await Observations(system.settings).start()
    await rt.start()
    try:
        # A: 1 + 62 + 1 = 64 taken; one more (65) refused. B: 1 + 62 = 63; a batch of 2 refused
        # whole. Each opening prompt calls a function, so the native Turn stays open.
        a = await create(system, "claude_code", "opening A call probe {\"n\": 1}")
        b = await create(system, "claude_code", "opening B call probe {\"n\": 2}")
        calls = {sid: await system.items.wait_for(sid, lambda i: i["type"] == "function_call")
                 for sid in (a, b)}
        turns = {sid: c["turn_id"] for sid, c in calls.items()}
        for sid in (a, b):
            await send(system, sid, [msg(text(f"m{k}")) for k in range(62)], "steered")
        await send(system, a, [msg(text("sixty-fourth"))], "steered")
        await obs.wait_for(a, lambda r: "sixty-fourth" in json.dumps(r.get("native")))

        over = {a: [msg(text('sixty-fifth call late {"n": 3}'))],
                b: [msg(text("over0")), msg(text('over1 call late {"n": 4}'))]}
        for sid, batch in over.items():
            await send(system, sid, batch, "steered")
        for sid, batch in over.items():
            t = turns[sid]
            refusal = await obs.wait_for(sid, lambda r: isinstance(r.get("refusal"), dict))
            assert refusal["turn_id"] == t and refusal["refusal"]["kind"] == "steer"
            assert refusal["refusal"]["code"] == REFUSAL_TURN_BOUND_EXCEEDED
            assert refusal["refusal"]["terminal"] is True
            # Nothing of the refused batch reached the native Turn.
            seen = json.dumps([r.get("native") for r in obs.by_session[sid]])
            assert "sixty-fifth" not in seen and "over0" not in seen and "late" not in seen
            # The native Turn ended (observed): the pending call released, then a failed end.
            end = await obs.wait_for(sid, lambda r: (r.get("native") or {}).get("type")
                                     == "result")
            assert end["turn_id"] == t and end["native"]["subtype"] == "error"
            release = await obs.wait_for(sid, lambda r: (r.get("native") or {}).get("type")
                                         == "tool_release")
            assert release["native"]["tool_use_id"] == calls[sid]["call_id"]
            # Core's Turn ends failed, from the observed end, with the bound as its reason.
            fail = await system.items.wait_for(sid, failed_turn(t))
            assert fail["reason"] == (
                "the runtime ended the native Turn: turn_message_bound_exceeded: the batch of "
                f"{len(batch)} would bring the native Turn to 65 user messages; the bound is 64 "
                "including the opening prompt; nothing of it was submitted")

        await asyncio.sleep(1.5)  # anything the refused batch might still cause
        for sid, batch in over.items():
            got = await items(system, sid)
            assert [(i["type"], i.get("name")) for i in got if i["type"] == "function_call"] == [
                ("function_call", "probe")]
            # Exactly: the opening message, the Turn, its call, the 62 + 1 steered messages, the
            # refused batch (stored), one failed end — nothing after it.
            assert [(i["type"], i.get("state")) for i in got if i["type"] != "message"] == [
                ("turn", "started"), ("function_call", None), ("turn", "failed")]
            assert got[-1]["type"] == "turn" and got[-1]["state"] == "failed"
            # The refused input stays stored, exactly as sent (the user's messages: the reference
            # Runtime's echoes are the agent's).
            assert [i["content"] for i in got
                    if i["type"] == "message" and i["role"] == "user"][-len(batch):] == [
                m["content"] for m in batch]
        # The next input opens a new Core Turn and a new native Turn.
        await send(system, a, [msg(text("fresh"))], "started")
        await obs.wait_for(a, lambda r: "fresh" in json.dumps(r.get("native")))
        started = [r for r in obs.by_session[a]
                   if (r.get("native") or {}).get("subtype") == "init"]
        assert len(started) == 2 and started[1]["turn_id"] != turns[a]
    finally:
        await rt.stop()
        await obs.close()


async def test_redelivered_record_waiting_for_a_runtime_is_queued_once(
        short_wait_system: System) -> None:
    """Crash safety: a stored record queued for a Runtime and then redelivered (the
    dispatcher crashed before committing its offset) is accepted again without error — it used
    to raise DuplicateKeyError on its own pending entry, so the partition never moved on."""
    system = short_wait_system
    disp = system.dispatcher
    sid = "session_" + "ab" * 16
    rec: Json = {"schema": "session.stored/1", "session_id": sid, "event_id": "evt_" + "cd" * 16,
                 "turn_id": "turn_" + "ef" * 16, "kind": "start", "harness": "minimax_code",
                 "placement": "self_hosted", "has_images": False,
                 "messages": [msg(text("waiting"))]}
    async with disp.lock:
        await disp.binder.accept(rec)
        await disp.binder.accept(rec)  # the redelivery
    docs = await disp.repo.pending(sid)
    assert len(docs) == 1 and docs[0]["record"] == rec


async def test_one_binding_per_session_when_two_replicas_bind_at_once(system: System) -> None:
    """Rebalance / sweeper: two replicas read a waiting Session's binding (unbound)
    and choose different Runtimes. The second write must not replace the first — it learns the
    winner instead (else both would deliver the Session's input: two native Turns)."""
    disp = system.dispatcher
    sid = "session_" + uuid.uuid4().hex
    await disp.repo.create_binding({"_id": sid, "harness": "codex", "placement": "none",
                                       "needs_images": False, "runtime_id": None,
                                       "status": "waiting_for_runtime"})

    def runtime(name: str) -> RuntimeInfo:
        return RuntimeInfo(runtime_id=name, harness="codex", placements=frozenset({"none"}),
                           bridge_protocol=None, message_images=True,
                           function_result_images=True, status="ready",
                           heartbeat_at=datetime.now(UTC))

    assert await disp.binder.claim(sid, None, runtime("rt_first")) is True
    assert await disp.binder.claim(sid, None, runtime("rt_second")) is False  # it read "unbound"
    doc = await disp.repo.binding(sid)
    assert doc is not None and doc["runtime_id"] == "rt_first"
    # a rebind from the Runtime it read (gone) still works
    assert await disp.binder.claim(sid, "rt_first", runtime("rt_second")) is True
    doc = await disp.repo.binding(sid)
    assert doc is not None and doc["runtime_id"] == "rt_second"


@pytest.mark.parametrize("end_first", [False, True], ids=["refusal-first", "turn-end-first"])
async def test_a_steer_refused_because_the_turn_ended_starts_the_next_turn(
        system: System, end_first: bool) -> None:
    """The race the chaos suite found: Core steers into a Turn the harness has just ended. The
    Runtime refuses (code ``turn_ended``); the stored messages are handed over again as the
    start of a new Turn — never dropped, never stored twice — whichever of the refusal and the
    Runtime's end of the old Turn Core sees first."""
    rt = await system.runtime("codex")
    sid = await create(system, "codex", "first")
    first = await rt.next_delivery(timeout=20)
    t1 = first["turn_id"]
    uri = png_data_uri(3, 2, (9, 8, 7))
    sent = [msg(text("late steer"), image(uri)), msg(text(""), text("second"))]
    await send(system, sid, sent, "steered")
    steer = await rt.next_delivery(timeout=20)
    assert steer["kind"] == "steer" and steer["turn_id"] == t1

    turn_end = {"method": "turn/completed",
                "params": {"threadId": "thr_1", "turnId": "nt_1", "status": "completed"}}
    refusal = {"delivery_id": steer["delivery_id"], "kind": "steer", "terminal": True,
               "code": "turn_ended", "reason": f"the native turn of {t1} has ended"}
    if end_first:
        await rt.observe(sid, turn_end, turn_id=t1)
        await system.items.wait_for(sid, lambda i: i["type"] == "turn"
                                    and i["turn_id"] == t1 and i["state"] == "completed")
    await rt.observe(sid, None, turn_id=t1, refusal=refusal)
    again = await rt.next_delivery(timeout=20)
    assert again["kind"] == "start" and again["turn_id"] != t1
    assert again["delivery_id"] == steer["delivery_id"] + "_r1"
    assert again["messages"] == steer["messages"] == sent  # the same content, byte for byte
    if not end_first:
        await rt.observe(sid, turn_end, turn_id=t1)  # late: for an inactive Turn
    started = await system.items.wait_for(
        sid, lambda i: i["type"] == "turn" and i["turn_id"] == again["turn_id"])
    assert started["state"] == "started" and t1 in started["reason"]
    await assert_no_delivery(rt, 1.0)
    got = await items(system, sid)
    assert [i["sequence"] for i in got] == list(range(1, len(got) + 1))
    assert [(i["type"], i.get("turn_id"), i.get("state")) for i in got] == [
        ("message", t1, None), ("turn", t1, "started"),
        ("message", t1, None), ("message", t1, None),  # stored once, as sent
        ("turn", t1, "completed"), ("turn", again["turn_id"], "started")]
    assert [i["content"] for i in got if i["type"] == "message"][1:] == [
        m["content"] for m in sent]
    # The same refusal again (a redelivered observation): storage replays its journaled
    # decision — the same delivery, the messages read back from the store — and writes nothing.
    await rt.observe(sid, None, turn_id=t1, refusal=refusal)
    replayed = await rt.next_delivery(timeout=20)
    assert {k: replayed[k] for k in ("delivery_id", "turn_id", "kind", "messages")} == {
        k: again[k] for k in ("delivery_id", "turn_id", "kind", "messages")}
    await asyncio.sleep(1.0)
    assert await items(system, sid) == got

"""The Claude Code live harness (``runtimes.claude.live``) driving the real binary
against the scripted model server, without Kafka: what it emits for each delivery."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from runtimes.claude import process as claude_process
from runtimes.claude.live import ClaudeLive
from runtimes.harness import Emit
from runtimes.live import LiveOptions
from scripted_model.server import ModelServer
from shared.domain.observations import CallOpened, TurnEnded, classify_all
from shared.domain.receipts import Confirmed, expect, match_observation
from tests.support.skips import unavailable

if not Path(claude_process.default_binary()).exists():
    unavailable("claude is not installed (python3 -m deploy.local.stack install)", module=True)

Json = dict[str, Any]


class Sink:
    def __init__(self) -> None:
        self.records: list[Json] = []
        self.event = asyncio.Event()

    def __call__(self, emits: list[Emit]) -> None:
        self.records += [e.record for e in emits]
        self.event.set()

    async def wait(self, pred: Callable[[Json], bool], timeout: float = 60) -> Json:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        seen = 0
        while True:
            for r in self.records[seen:]:
                if pred(r):
                    return r
            seen = len(self.records)
            self.event.clear()
            left = end - loop.time()
            if left <= 0:
                raise AssertionError(f"not seen in {timeout}s; got {self.records[-5:]}")
            try:
                await asyncio.wait_for(self.event.wait(), left)
            except TimeoutError:
                pass


async def live(model: ModelServer, tmp: Path, **kw: Any) -> tuple[ClaudeLive, Sink]:
    h = ClaudeLive(LiveOptions(runtime_id="rt_test", harness="claude_code",
                               model_base_url=model.url, work_dir=tmp, **kw))
    sink = Sink()
    await h.start(sink)
    return h, sink


@pytest.fixture
async def harness(model: ModelServer, tmp_path: Path) -> AsyncIterator[tuple[ClaudeLive, Sink]]:
    h, sink = await live(model, tmp_path)
    yield h, sink
    await h.stop()


def start(sid: str, turn: str, *parts: Json, kind: str = "start") -> Json:
    return {"schema": "runtime.delivery/1", "delivery_id": f"dlv_{uuid.uuid4().hex}",
            "runtime_id": "rt_test", "session_id": sid, "turn_id": turn, "kind": kind,
            "messages": [{"role": "user", "content": list(parts)}]}


def t(s: str) -> Json:
    return {"type": "input_text", "text": s}


def turn_end(r: Json) -> bool:
    return any(isinstance(f, TurnEnded) for f in classify_all("claude_code", r.get("native")))


def call_of(r: Json) -> CallOpened | None:
    facts = [f for f in classify_all("claude_code", r.get("native")) if isinstance(f, CallOpened)]
    return facts[0] if facts else None


PNG = base64.b64encode(bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201e2213b"
    "c50000000049454e44ae426082")).decode()


async def test_function_result_with_an_image_is_confirmed_by_the_real_receipt(
        harness: tuple[ClaudeLive, Sink], model: ModelServer) -> None:
    h, sink = harness
    k = f"LIVE-{uuid.uuid4().hex[:8]}"
    model.scripts.register(k, [[{"tool_call": {"name": "get_weather",
                                               "arguments": {"city": "Oslo"}}}],
                               [{"text": "thanks"}]])
    await h.handle(start("session_a", "turn_1", t(f"{k} weather?")))
    rec = await sink.wait(lambda r: call_of(r) is not None)
    call = call_of(rec)
    assert call is not None and call.name == "get_weather" and call.arguments == {"city": "Oslo"}
    content = [t("sunny"), {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}]
    await h.handle({"delivery_id": "dlv_r1", "session_id": "session_a", "turn_id": "turn_1",
                    "kind": "function_result", "call_id": call.call_id, "name": "get_weather",
                    "success": True, "content": content})
    exp = expect(harness="claude_code", session_id="session_a", call_id=call.call_id,
                 name="get_weather", success=True, content=content,
                 native_session_id=call.native_ids["session_id"])
    receipt = await sink.wait(lambda r: isinstance(match_observation(exp, r), Confirmed))
    assert receipt["turn_id"] == "turn_1"
    end = await sink.wait(turn_end)
    assert end["native"]["subtype"] == "success" and end["turn_id"] == "turn_1"
    # the model received the result: text then the image, bytes unchanged
    body = json.dumps(model.scripts.recorded(k)[1].body)
    assert PNG in body


async def test_the_65th_message_is_refused_and_the_native_turn_ends(
        harness: tuple[ClaudeLive, Sink], model: ModelServer) -> None:
    h, sink = harness
    k = f"LIVE-{uuid.uuid4().hex[:8]}"
    model.scripts.register(k, [[{"wait": 8}, {"text": "slow"}]])
    opening = start("session_b", "turn_1", t(f"{k} go"))
    opening["messages"] *= 60
    await h.handle(opening)
    ok = start("session_b", "turn_1", t("four more"), kind="steer")
    ok["messages"] *= 4  # 64 in all: accepted
    await h.handle(ok)
    await sink.wait(lambda r: (r.get("native") or {}).get("state") == "started")  # running
    over = start("session_b", "turn_1", t("one too many"), kind="steer")
    await h.handle(over)
    refused = await sink.wait(lambda r: r.get("refusal") is not None)
    assert refused["refusal"]["delivery_id"] == over["delivery_id"]
    assert "turn_message_bound_exceeded" in refused["refusal"]["reason"]
    end = await sink.wait(turn_end, 30)
    assert end["native"]["subtype"] != "success" and end["turn_id"] == "turn_1"
    written = [r["native"] for r in sink.records
               if r.get("native") and r["native"].get("isReplay")]
    assert all("one too many" not in json.dumps(n) for n in written)


async def test_garbage_fails_the_turn_and_the_session_runs_again(
        model: ModelServer, tmp_path: Path) -> None:
    fake = tmp_path / "fake-claude"
    fake.write_text("#!/bin/sh\necho 'this is not json'\nsleep 30\n")
    fake.chmod(0o755)
    h, sink = await live(model, tmp_path, binary=str(fake))
    try:
        await h.handle(start("session_c", "turn_1", t("hi")))
        failed = await sink.wait(lambda r: r.get("refusal") is not None, 30)
        assert "not a JSON record" in failed["refusal"]["reason"]
        assert failed["turn_id"] == "turn_1" and h.bad_lines == 1
        # restarted lazily on the next delivery (the fake fails again: counted, no loop)
        await h.handle(start("session_c", "turn_2", t("again")))
        await sink.wait(lambda r: r.get("refusal") is not None and r["turn_id"] == "turn_2", 30)
        assert h.bad_lines == 2 and h.restarts == 2
    finally:
        await h.stop()


async def test_a_restart_while_the_failed_process_is_reaped_keeps_the_new_process(
        model: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next delivery may start a new process before the failed one is reaped (a loaded
    machine): the reaping must not cancel the new process's reader or close its bridge."""
    reaped = asyncio.Event()
    wait = asyncio.subprocess.Process.wait

    async def slow_wait(proc: asyncio.subprocess.Process) -> int:
        code = await wait(proc)
        await asyncio.sleep(1.0)  # the reaping is still under way when turn_2 arrives
        reaped.set()
        return code

    monkeypatch.setattr(asyncio.subprocess.Process, "wait", slow_wait)
    fake = tmp_path / "fake-claude"
    mark = tmp_path / "started-once"
    # the first process fails at once; the second only once the first has been reaped
    fake.write_text(f"#!/bin/sh\nread line\nif [ -e {mark} ]; then sleep 2; fi\n"
                    f"touch {mark}\necho 'this is not json'\nexec sleep 30\n")
    fake.chmod(0o755)
    h, sink = await live(model, tmp_path, binary=str(fake))
    try:
        await h.handle(start("session_e", "turn_1", t("hi")))
        await sink.wait(lambda r: r.get("refusal") is not None, 30)
        assert not reaped.is_set()
        await h.handle(start("session_e", "turn_2", t("again")))
        await sink.wait(lambda r: r.get("refusal") is not None and r["turn_id"] == "turn_2", 15)
        assert reaped.is_set() and h.bad_lines == 2 and h.restarts == 2
    finally:
        await h.stop()


async def test_no_image_capability_refuses_images(model: ModelServer, tmp_path: Path) -> None:
    h, sink = await live(model, tmp_path, images=False)
    try:
        assert h.capabilities() == {"message_images": False, "function_result_images": False}
        await h.handle(start("session_d", "turn_1", t("see"),
                             {"type": "input_image",
                              "image_url": f"data:image/png;base64,{PNG}"}))
        refused = await sink.wait(lambda r: r.get("refusal") is not None, 10)
        assert "image" in refused["refusal"]["reason"]
    finally:
        await h.stop()

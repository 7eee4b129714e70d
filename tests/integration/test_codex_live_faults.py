"""The live Codex driver against a misbehaving harness process (a real child process,
tests/support/broken_codex.py): a crash, garbage output or a hang fails the running Turn with a
reason, the next delivery gets a fresh process, bad lines are counted, nothing crash-loops."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from runtimes.codex.live import CodexLive
from runtimes.harness import Emit
from runtimes.live import LiveOptions

BROKEN = str(Path(__file__).resolve().parents[1] / "support" / "broken_codex.py")


def start(n: int, turn: str) -> dict[str, Any]:
    return {"runtime_id": "rt_x", "delivery_id": f"dlv_{n}", "session_id": "session_1",
            "turn_id": turn, "kind": "start",
            "messages": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}


async def until(out: list[dict[str, Any]], pred: Any, wait_s: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        for r in out:
            if pred(r):
                return r
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing matched in {out!r:.2000}")


def failed_end(turn: str) -> Any:
    return lambda r: (r.get("turn_id") == turn and isinstance(r.get("native"), dict)
                      and r["native"].get("method") == "turn/completed"
                      and r["native"]["params"]["turn"]["status"] == "failed")


@pytest.mark.parametrize(("mode", "reason"), [
    ("crash", "exited"), ("garbage", "not JSON"), ("hang", "printed nothing"),
])
async def test_a_broken_process_fails_its_turn_and_is_replaced(
        mode: str, reason: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BROKEN_CODEX_MODE", mode)
    live = CodexLive(LiveOptions(runtime_id="rt_x", harness="codex",
                                 model_base_url="http://127.0.0.1:9/v1", binary=BROKEN,
                                 work_dir=tmp_path, turn_timeout_s=2.0))
    out: list[dict[str, Any]] = []

    def emit(es: list[Emit]) -> None:
        out.extend(e.record for e in es)

    await live.start(emit)
    try:
        await live.handle(start(1, "turn_1"))
        end = await until(out, failed_end("turn_1"))
        assert end["native"]["synthesized"] is True
        assert reason in end["native"]["params"]["turn"]["error"]["message"]
        if mode == "garbage":
            assert live.bad_lines >= 20
        assert live.restarts == 1
        # the Session runs again on a fresh process
        monkeypatch.setenv("BROKEN_CODEX_MODE", "ok")
        await live.handle(start(2, "turn_2"))
        done = await until(out, lambda r: r.get("turn_id") == "turn_2" and isinstance(
            r.get("native"), dict) and r["native"].get("method") == "turn/completed")
        assert done["native"]["params"]["turn"]["status"] == "completed"
        assert "synthesized" not in done["native"]
    finally:
        await live.stop()


async def test_a_binary_that_dies_at_once_is_refused_with_back_off_never_looping(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BROKEN_CODEX_MODE", "dead")
    live = CodexLive(LiveOptions(runtime_id="rt_x", harness="codex",
                                 model_base_url="http://127.0.0.1:9/v1", binary=BROKEN,
                                 work_dir=tmp_path))
    out: list[dict[str, Any]] = []
    await live.start(lambda es: out.extend(e.record for e in es))
    try:
        t0 = time.monotonic()
        for n in range(3):
            await live.handle(start(n, f"turn_{n}"))
        refusals = []
        while len(refusals) < 3 and time.monotonic() - t0 < 30:
            await asyncio.sleep(0.05)
            refusals = [r for r in out if r.get("native") is None]
        assert [r["refusal"]["terminal"] for r in refusals] == [True] * 3
        assert all("harness_unavailable" in r["refusal"]["reason"] for r in refusals)
        # spawned only on demand (3 deliveries → 3 attempts), with back-off in between
        assert live.restarts == 3
        assert time.monotonic() - t0 >= 0.5 + 1.0
        await asyncio.sleep(1.5)
        assert live.restarts == 3  # nothing respawns by itself
    finally:
        await live.stop()

"""Case 5b — the Claude Code Runtime's overhead per Turn against the bare harness.

Both sides run the real ``claude`` (stream-json, the same flags and MCP bridge config) against
the same in-process scripted model server (every request answered "ok" at once), Turns one after
another on one process:

* **bare**: a native user message written on stdin → its ``result`` read from stdout;
* **runtime**: a ``start`` delivery published on ``runtime.deliveries`` → the Runtime
  (``RuntimeService`` with the real Claude engine, in this process) → its ``result``
  observation read back from ``runtime.observations``.

Figure: median Runtime Turn / median bare Turn (target ≤ 1.2). The first Turn of each side (the
process start) is not counted."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import Infra, Run, new_tag
from bench.harness_overhead import measure

TEXT = "bench: say ok"


async def _bare(model_url: str, turns: int) -> list[float]:
    import sys

    from services.runtime import claude_process
    from services.runtime.claude_live import REPO_ROOT
    from services.runtime.live import DEFAULT_FUNCTIONS

    settings = claude_process.ClaudeSettings(model_base_url=model_url)
    out: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-claude-") as tmp:
        home = Path(tmp)
        # the same MCP server config as the Runtime's (no call is made, so no socket is needed)
        (home / "tools.json").write_text(json.dumps(DEFAULT_FUNCTIONS))
        (home / "mcp.json").write_text(json.dumps({"mcpServers": {"core": {
            "type": "stdio", "command": sys.executable,
            "args": ["-m", "services.runtime.claude_mcp", "--socket", str(home / "none.sock"),
                     "--tools", str(home / "tools.json")],
            "env": {"PYTHONPATH": str(REPO_ROOT)}}}}))
        proc = await asyncio.create_subprocess_exec(
            *claude_process.command(settings, mcp_config=home / "mcp.json",
                                    tools=[f["name"] for f in DEFAULT_FUNCTIONS]),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, cwd=home, limit=1 << 26,
            env=claude_process.environment(settings, home))
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for i in range(turns + 1):
                line = {"type": "user", "message": {"role": "user", "content": [
                    {"type": "text", "text": TEXT}]}, "parent_tool_use_id": None,
                    "session_id": "", "uuid": str(uuid.uuid4())}
                t0 = time.perf_counter()
                proc.stdin.write((json.dumps(line) + "\n").encode())
                await proc.stdin.drain()
                while json.loads(await asyncio.wait_for(proc.stdout.readline(), 120)
                                 ).get("type") != "result":
                    pass
                if i:
                    out.append(time.perf_counter() - t0)
        finally:
            proc.kill()
            await proc.wait()
    return out


async def _runtime(infra: Infra, model_url: str, turns: int) -> list[float]:
    from bench.common import prepare_topics
    from services.runtime.app import RuntimeConfig, RuntimeService
    from services.runtime.claude_live import ClaudeLive
    from services.runtime.conformance import Wire
    from services.runtime.live import LiveOptions
    from shared.domain.delivery import message_delivery
    from shared.ids import new_id

    tag = new_tag("harness-claude")
    await prepare_topics(infra, tag)
    settings = infra.settings(tag)
    config = RuntimeConfig(runtime_id=new_id("rt"), harness="claude_code")
    live = ClaudeLive(LiveOptions(runtime_id=config.runtime_id, harness="claude_code",
                                  model_base_url=model_url))
    svc = RuntimeService(settings, config, live=live)
    await svc.start()
    wire = Wire(settings)
    await wire.start()
    out: list[float] = []
    try:
        sid = new_id("session")
        q = wire.listen(sid)
        await asyncio.wait_for(svc.ready.wait(), 60)
        for i in range(turns + 1):
            turn_id = new_id("turn")
            record: dict[str, Any] = message_delivery(
                delivery_id=new_id("dlv"), runtime_id=config.runtime_id, session_id=sid,
                turn_id=turn_id, kind="start",
                messages=[{"role": "user", "content": [{"type": "input_text", "text": TEXT}]}])
            t0 = time.perf_counter()
            await wire.deliver(record)
            while True:
                obs = await asyncio.wait_for(q.get(), 120)
                native = obs.get("native") or {}
                if obs.get("turn_id") == turn_id and native.get("type") == "result":
                    break
            if i:
                out.append(time.perf_counter() - t0)
    finally:
        await wire.stop()
        await svc.stop()
    return out


def run(run_: Run, infra: Infra, quick: bool = False) -> None:
    measure(run_, infra, quick, case="5_claude_runtime_turn_overhead",
            harness="claude (stream-json)", bare=_bare, runtime=_runtime,
            what="Kafka in and out, live driver, MCP bridge configured")

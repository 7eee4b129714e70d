"""Case 5b — the Claude Code Runtime's overhead per Turn against the bare harness.

Both sides run the real ``claude`` (stream-json, the same flags and MCP bridge config) against
the same scripted model server (its own process; every request answered "ok" at once), Turns
one after another on one process each, paired with the Runtime's (``harness_overhead.paired``):

* **bare**: a native user message written on stdin → its ``result`` read from stdout;
* **runtime**: a ``start`` delivery published on ``runtime.deliveries`` → the Runtime
  (``RuntimeService`` with the real Claude engine, in this process) → its ``result``
  observation read back from ``runtime.observations``.

Figure: median Runtime Turn / median bare Turn (target ≤ 1.2). The first Turn of each side (the
process start) is not counted."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from bench.common import Infra, Run
from bench.harness_overhead import TurnFn, measure, runtime_over_kafka

TEXT = "bench: say ok"


@contextlib.asynccontextmanager
async def bare_claude(model_url: str, _infra: Infra) -> AsyncIterator[TurnFn]:
    import sys

    from runtimes.claude import process as claude_process
    from runtimes.claude.bridge import REPO_ROOT
    from runtimes.live import DEFAULT_FUNCTIONS

    settings = claude_process.ClaudeSettings(model_base_url=model_url)
    with tempfile.TemporaryDirectory(prefix="bench-claude-") as tmp:
        home = Path(tmp)
        # the same MCP server config as the Runtime's (no call is made, so no socket is needed)
        (home / "tools.json").write_text(json.dumps(DEFAULT_FUNCTIONS))
        (home / "mcp.json").write_text(json.dumps({"mcpServers": {"core": {
            "type": "stdio", "command": sys.executable,
            "args": ["-m", "runtimes.claude.mcp", "--socket", str(home / "none.sock"),
                     "--tools", str(home / "tools.json")],
            "env": {"PYTHONPATH": str(REPO_ROOT)}}}}))
        proc = await asyncio.create_subprocess_exec(
            *claude_process.command(settings, mcp_config=home / "mcp.json",
                                    tools=[f["name"] for f in DEFAULT_FUNCTIONS]),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, cwd=home, limit=1 << 26,
            env=claude_process.environment(settings, home))
        assert proc.stdin is not None and proc.stdout is not None
        stdin, stdout = proc.stdin, proc.stdout

        async def turn() -> float:
            line = {"type": "user", "message": {"role": "user", "content": [
                {"type": "text", "text": TEXT}]}, "parent_tool_use_id": None,
                "session_id": "", "uuid": str(uuid.uuid4())}
            t0 = time.perf_counter()
            stdin.write((json.dumps(line) + "\n").encode())
            await stdin.drain()
            while json.loads(await asyncio.wait_for(stdout.readline(), 120)
                             ).get("type") != "result":
                pass
            return time.perf_counter() - t0

        try:
            yield turn
        finally:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def runtime_claude(model_url: str, infra: Infra) -> AsyncIterator[TurnFn]:
    from runtimes.claude.live import ClaudeLive
    from runtimes.live import LiveOptions
    from shared.ids import new_id

    live = ClaudeLive(LiveOptions(runtime_id=new_id("rt"), harness="claude_code",
                                  model_base_url=model_url))
    async with runtime_over_kafka(infra, "claude_code", live,
                                  lambda n: n.get("type") == "result") as turn:
        yield turn


def run(run_: Run, infra: Infra, quick: bool = False) -> None:
    measure(run_, infra, quick, case="5_claude_runtime_turn_overhead",
            harness="claude (stream-json)", bare=bare_claude, runtime=runtime_claude,
            what="Kafka in and out, live driver, MCP bridge configured")

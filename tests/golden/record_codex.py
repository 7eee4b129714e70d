"""``python -m tests.golden.record_codex`` — re-record the Codex golden transcripts.

Spawns the real ``codex app-server`` (the cached install) against the scripted model server and
writes, per case, every line the binary printed to ``tests/data/native/codex/<case>.jsonl``
(one JSON message a line, as printed; nothing rewritten). The unit tests of the observation
classifier and the receipt matcher run on these files (tests/unit/test_codex_golden.py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from runtimes.codex.rpc import BareCodex
from runtimes.live import DEFAULT_FUNCTIONS, default_binary
from scripted_model.server import ModelServer

OUT = Path(__file__).resolve().parents[1] / "data" / "native" / "codex"
# a 1×1 PNG
PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
       "z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

Case = Callable[[BareCodex, ModelServer], Awaitable[None]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__.removeprefix("case_")] = fn
    return fn


def _call(name: str = "get_weather") -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": {"city": "Paris"}}}


async def _tool_case(c: BareCodex, ms: ModelServer, key: str, items: list[dict[str, Any]],
                     success: bool) -> None:
    ms.scripts.register(key, [[_call()], [{"text": "thanks"}]])
    turn = await c.turn([{"type": "text", "text": f"{key} weather?"}])
    req = await c.wait_for("item/tool/call", turnId=turn)
    c.send({"id": req["id"], "result": {"contentItems": items, "success": success}})
    await c.wait_for("turn/completed", threadId=c.thread_id)


@case
async def case_plain_text(c: BareCodex, ms: ModelServer) -> None:
    ms.scripts.register("GOLD-plain", [[{"text": "hello back"}]])
    await c.turn([{"type": "text", "text": "GOLD-plain hi"},
                  {"type": "text", "text": "\n\n"}, {"type": "text", "text": "second message"}])
    await c.wait_for("turn/completed", threadId=c.thread_id)


@case
async def case_tool_text(c: BareCodex, ms: ModelServer) -> None:
    await _tool_case(c, ms, "GOLD-tool-text", [{"type": "inputText", "text": "sunny, 21 C"}],
                     True)


@case
async def case_tool_image(c: BareCodex, ms: ModelServer) -> None:
    await _tool_case(c, ms, "GOLD-tool-image", [
        {"type": "inputText", "text": "the radar"}, {"type": "inputImage", "imageUrl": PNG},
        {"type": "inputText", "text": "after the image"}], True)


@case
async def case_tool_failed(c: BareCodex, ms: ModelServer) -> None:
    # a failed result: the output parts, then the error text as a final text part
    await _tool_case(c, ms, "GOLD-tool-failed", [
        {"type": "inputText", "text": "partial output"},
        {"type": "inputText", "text": "city not found"}], False)


@case
async def case_steer(c: BareCodex, ms: ModelServer) -> None:
    ms.scripts.register("GOLD-steer", [[{"wait": 2.0}, {"text": "first answer"}],
                                       [{"text": "answer after the steer"}]])
    turn = await c.turn([{"type": "text", "text": "GOLD-steer start"}])
    # the input is recorded and the model request is out (the scripted model holds its answer
    # for 2 s): the steer lands while the model streams
    await c.wait_for("item/completed", turnId=turn)
    await c.request("turn/steer", {"threadId": c.thread_id, "expectedTurnId": turn,
                                   "input": [{"type": "text", "text": "steered in"}]})
    await c.wait_for("turn/completed", threadId=c.thread_id)


@case
async def case_unanswered(c: BareCodex, ms: ModelServer) -> None:
    """A Turn that ends with a call unanswered: the client interrupts the Turn."""
    ms.scripts.register("GOLD-unanswered", [[_call()], [{"text": "never"}]])
    turn = await c.turn([{"type": "text", "text": "GOLD-unanswered weather?"}])
    await c.wait_for("item/tool/call", turnId=turn)
    await c.request("turn/interrupt", {"threadId": c.thread_id, "turnId": turn})
    await c.wait_for("turn/completed", threadId=c.thread_id)


@case
async def case_subagent(c: BareCodex, ms: ModelServer) -> None:
    """Sub-agents on (``SUBAGENTS``; the Runtime's config has them off): the root agent spawns a
    helper whose model calls the Session's function. What the binary prints of both threads."""
    ms.scripts.register("GOLD-subagent-root", [
        [{"tool_call": {"name": "spawn_agent", "namespace": "multi_agent_v1",
                        "arguments": {"message": "GOLD-subagent-kid weather in Paris",
                                      "task_name": "weather_helper"}}}],
        [{"tool_call": {"name": "wait_agent", "namespace": "multi_agent_v1",
                        "arguments": {"timeout_ms": 20000}}}],
        [{"text": "the helper answered"}]])
    ms.scripts.register("GOLD-subagent-kid", [[_call()], [{"text": "helper: no weather"}]])
    await c.turn([{"type": "text", "text": "GOLD-subagent-root ask a helper"}])
    await c.wait_for("turn/completed", threadId=c.thread_id)


SUBAGENTS = {"subagent"}  # cases recorded with sub-agents on


async def record(names: list[str], binary: str, version: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    ms = ModelServer().start()
    try:
        for name in names:
            async with BareCodex(ms.url + "/v1", list(DEFAULT_FUNCTIONS), binary,
                                 subagents=name in SUBAGENTS) as c:
                start = len(c.printed)
                await CASES[name](c, ms)
                lines = c.printed[start:]
            path = OUT / f"{name}.jsonl"
            path.write_text("".join(json.dumps(m, separators=(",", ":")) + "\n"
                                    for m in lines))
            print(f"{path.relative_to(OUT.parents[3])}: {len(lines)} records ({version})")
        (OUT / "VERSION").write_text(version + "\n")
    finally:
        ms.stop()


def main(argv: list[str] | None = None) -> None:
    names = list(argv if argv is not None else sys.argv[1:]) or list(CASES)
    binary = default_binary("codex")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             check=False).stdout.strip()
    asyncio.run(record(names, binary, version))


if __name__ == "__main__":
    main()

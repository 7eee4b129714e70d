"""The Runtime's side of the MCP bridge (``runtimes.claude.mcp`` is the other): the
``mcp.json`` that makes Claude Code start it, the relay that answers one call over the Unix
socket, and the MCP content a function result becomes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runtimes.claude import process as claude_process
from runtimes.claude.state import Session
from runtimes.simulation import ALTERED_SUFFIX
from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses.errors import AdapterError

CALL_LOOKUP_S = 5.0  # how long the bridge waits to see the assistant record of a relayed call
REPO_ROOT = Path(__file__).resolve().parents[2]

Json = dict[str, Any]


def write_mcp_config(home: Path, sock: Path, functions: list[Json]) -> Path:
    """``tools.json`` and ``mcp.json`` in the Session's home: Core's MCP server ``core``, started
    by Claude Code as ``python -m runtimes.claude.mcp``; returns ``mcp.json``."""
    tools = home / "tools.json"
    tools.write_text(json.dumps(functions))
    mcp = home / "mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {claude_process.MCP_SERVER: {
        "type": "stdio", "command": sys.executable,
        "args": ["-m", "runtimes.claude.mcp", "--socket", str(sock),
                 "--tools", str(tools)],
        "env": {"PYTHONPATH": str(REPO_ROOT)}}}}))
    return mcp


def corrupt_blocks(blocks: list[Json], mode: str | None) -> list[Json]:
    """Conformance's broken adapter (``--corrupt``); unchanged blocks otherwise."""
    if mode == "drop_image":
        return [b for b in blocks if b.get("type") != "image"] or [{"type": "text",
                                                                      "text": ""}]
    if mode == "alter_text":
        return [{**b, "text": b["text"] + ALTERED_SUFFIX} if b.get("type") == "text" else b
                for b in blocks]
    return blocks


def mcp_content(content: Sequence[Mapping[str, Any]], corrupt: str | None
                ) -> list[Json] | AdapterError:
    """A delivered function-result content list → the MCP ``content`` the bridge answers."""
    blocks = claude.content_blocks(content)
    if isinstance(blocks, AdapterError):
        return blocks
    out: list[Json] = []
    for b in corrupt_blocks(blocks, corrupt):
        if b["type"] == "image":
            out.append({"type": "image", "data": b["source"]["data"],
                        "mimeType": b["source"]["media_type"]})
        else:
            out.append({"type": "text", "text": b["text"]})
    return out


async def relay(s: Session, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                ) -> None:
    """One relayed MCP call: wait for Core's result (root calls) and answer it."""
    try:
        req = json.loads(await reader.readline())
        call_id = str(req.get("tool_use_id"))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CALL_LOOKUP_S
        while call_id not in s.root_calls and call_id not in s.sub_calls:
            if loop.time() > deadline:
                break
            s.seen.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(s.seen.wait(), 0.2)
        if call_id not in s.root_calls:
            answer: Json = {"content": [{"type": "text", "text": (
                "Core's public functions answer only the root agent")}], "isError": True}
        elif call_id in s.answers:
            answer = s.answers.pop(call_id)
        else:
            fut: asyncio.Future[Json] = loop.create_future()
            s.waiters[call_id] = fut
            answer = await fut
        writer.write((json.dumps(answer) + "\n").encode())
        await writer.drain()
    except (asyncio.CancelledError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()

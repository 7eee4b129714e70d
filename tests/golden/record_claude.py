"""Record the golden Claude Code transcripts: what the real binary prints, one record a line.

``python -m tests.golden.record_claude [--out DIR] [CASE…]`` runs the pinned ``claude`` (the
cached install) against the scripted model server, with Core's functions behind the MCP bridge
(``runtimes.claude.mcp``; here the recorder itself answers the relayed calls), and writes
``tests/data/native/claude_code/<case>.jsonl``: every stdout record of the run, exactly as printed.
The unit tests of the observation classifier and the receipt matcher run on these files.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtimes.claude import process as claude_process
from scripted_model.server import ModelServer

OUT = Path(__file__).resolve().parents[1] / "data" / "native" / "claude_code"
FUNCTIONS = [{"name": "get_weather", "description": "The weather for a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def png_b64() -> str:
    """A small deterministic PNG (Claude Code keeps images this small unchanged)."""
    from PIL import Image

    im = Image.new("RGB", (8, 8), (200, 30, 60))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


def user_line(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "user", "message": {"role": "user", "content": blocks},
            "parent_tool_use_id": None, "session_id": "", "uuid": str(uuid.uuid4())}


@dataclass
class Case:
    name: str
    replies: list[list[dict[str, Any]]]
    first: list[dict[str, Any]]
    answer: dict[str, Any] = field(default_factory=lambda: {
        "content": [{"type": "text", "text": "sunny, 21 C"}], "isError": False})
    extra_scripts: dict[str, list[list[dict[str, Any]]]] = field(default_factory=dict)
    steer: list[dict[str, Any]] | None = None  # sent once the first message is replayed
    answer_delay_s: float = 0.0  # the bridge answers the call this late (steer while pending)


def cases() -> list[Case]:
    img = png_b64()
    call = {"tool_call": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    return [
        Case("tool_call_text_result", [[call], [{"text": "It is sunny in Oslo."}]],
             [{"type": "text", "text": "GOLD-tool_call_text_result: weather in Oslo?"}]),
        Case("tool_result_image", [[call], [{"text": "Got the picture."}]],
             [{"type": "text", "text": "GOLD-tool_result_image: show the weather map"}],
             answer={"content": [{"type": "text", "text": "map:"},
                                 {"type": "image", "data": img, "mimeType": "image/png"}],
                     "isError": False}),
        Case("tool_result_error", [[call], [{"text": "The lookup failed."}]],
             [{"type": "text", "text": "GOLD-tool_result_error: weather in Atlantis?"}],
             answer={"content": [{"type": "text", "text": "partial: none"},
                                 {"type": "text", "text": "no such city"}], "isError": True}),
        # the same text as one block: the record cannot tell it from the two blocks above
        Case("tool_result_error_one_block", [[call], [{"text": "The lookup failed."}]],
             [{"type": "text", "text": "GOLD-tool_result_error_one_block: weather in Atlantis?"}],
             answer={"content": [{"type": "text", "text": "partial: none\nno such city"}],
                     "isError": True}),
        Case("image_message", [[{"text": "A red square."}]],
             [{"type": "text", "text": "GOLD-image_message: what is this?"},
              {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                           "data": img}}]),
        Case("steering", [[{"wait": 3}, {"text": "first answer"}], [{"text": "steered answer"}]],
             [{"type": "text", "text": "GOLD-steering: start"}],
             steer=[{"type": "text", "text": "GOLD-steering: and also this"}]),
        Case("steering_during_call", [[call], [{"text": "answered both"}]],
             [{"type": "text", "text": "GOLD-steering_during_call: weather?"}],
             steer=[{"type": "text", "text": "GOLD-steering_during_call: and tomorrow?"}],
             answer_delay_s=2.0),
        Case("subagent",
             [[{"tool_call": {"name": "Agent", "arguments": {
                 "description": "look up weather", "subagent_type": "general-purpose",
                 "run_in_background": False,
                 "prompt": "GOLD-subagent-prompt-for-the-helper: weather in Oslo"}}}]],
             [{"type": "text", "text": "GOLD-subagent: ask a helper"}],
             extra_scripts={"GOLD-subagent-prompt-for-the-helper": [
                 [call], [{"text": "helper: sunny"}], [{"text": "The helper says sunny."}]]}),
    ]


class Answerer:
    """The Runtime's side of the MCP bridge for the recorder: answers every relayed call."""

    def __init__(self, path: str, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.answer = answer
        self.calls: list[dict[str, Any]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                req = json.loads(buf)
                self.calls.append(req)
                conn.sendall((json.dumps(self.answer(req)) + "\n").encode())

    def close(self) -> None:
        self.sock.close()


def record(case: Case, server: ModelServer, out_dir: Path) -> Path:
    server.scripts.register(f"GOLD-{case.name}:", case.replies)
    for key, replies in case.extra_scripts.items():
        server.scripts.register(key, replies)
    with tempfile.TemporaryDirectory(prefix="claude-gold-") as tmp:
        home = Path(tmp)
        tools = home / "tools.json"
        tools.write_text(json.dumps(FUNCTIONS))
        sock = str(home / "bridge.sock")
        def answer(_req: dict[str, Any]) -> dict[str, Any]:
            time.sleep(case.answer_delay_s)
            return case.answer

        answerer = Answerer(sock, answer)
        mcp = home / "mcp.json"
        mcp.write_text(json.dumps({"mcpServers": {claude_process.MCP_SERVER: {
            "type": "stdio", "command": sys.executable,
            "args": ["-m", "runtimes.claude.mcp", "--socket", sock,
                     "--tools", str(tools)],
            "env": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}}}}))
        settings = claude_process.ClaudeSettings(model_base_url=server.url)
        cmd = claude_process.command(settings, mcp_config=mcp,
                                     tools=[f["name"] for f in FUNCTIONS])
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, cwd=home,
                                env=claude_process.environment(settings, home))
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(user_line(case.first)) + "\n")
        proc.stdin.flush()
        lines: list[str] = []
        deadline = time.monotonic() + 120
        steered = case.steer is None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            rec = json.loads(line)
            if not steered and rec.get("type") == "user" and rec.get("isReplay"):
                proc.stdin.write(json.dumps(user_line(case.steer or [])) + "\n")
                proc.stdin.flush()
                steered = True
            if _done(case, lines) or time.monotonic() > deadline:
                break
        proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        answerer.close()
    path = out_dir / f"{case.name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _done(case: Case, lines: list[str]) -> bool:
    """A ``result`` after every input was replayed (a steering message may be taken into the
    running Turn or start the next one: the recording waits for the ``result`` after it)."""
    recs = [json.loads(x) for x in lines]
    if not recs or recs[-1].get("type") != "result":
        return False
    replays = sum(1 for r in recs if r.get("type") == "user" and r.get("isReplay"))
    return replays >= (1 if case.steer is None else 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.golden.record_claude")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("cases", nargs="*")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    server = ModelServer().start()
    try:
        for case in cases():
            if args.cases and case.name not in args.cases:
                continue
            path = record(case, server, args.out)
            print(f"{case.name}: {sum(1 for _ in path.open())} records → {path}")
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A bare ``codex app-server`` client: the JSON-RPC lines and nothing else (no Kafka, no Core).

The golden-transcript recorder (``python -m tests.golden.record_codex``) and the bench's bare
baseline (``bench/harness_overhead.py``) drive the real binary with it; the Runtime's driver
(``runtimes.codex.live``) sets the process up the same way (``config.config_toml``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from runtimes.codex.config import config_toml, dynamic_tools
from runtimes.live import default_binary

Json = dict[str, Any]


class BareCodex:
    def __init__(self, model_base_url: str, functions: list[Json], binary: str | None = None,
                 model: str = "scripted", subagents: bool = False) -> None:
        self.subagents = subagents  # config_toml(subagents=…): only to record a sub-agent
        self.base_url = model_base_url
        self.functions = functions
        self.binary = binary or default_binary("codex")
        self.model = model
        self.printed: list[Json] = []  # every line the binary printed, parsed, in order
        self._next = 1
        self._waiting: dict[int, asyncio.Future[Json]] = {}
        self._arrived = asyncio.Condition()
        self.thread_id = ""

    async def __aenter__(self) -> BareCodex:
        self.home = Path(tempfile.mkdtemp(prefix="bare-codex-"))
        (self.home / "work").mkdir()
        (self.home / "config.toml").write_text(config_toml(self.base_url, self.model,
                                                           "BARE_CODEX_KEY",
                                                           subagents=self.subagents))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_")}
        env.update({"CODEX_HOME": str(self.home), "HOME": str(self.home),
                    "BARE_CODEX_KEY": "local", "HTTPS_PROXY": "http://127.0.0.1:9",
                    "HTTP_PROXY": "http://127.0.0.1:9", "ALL_PROXY": "http://127.0.0.1:9",
                    "NO_PROXY": "127.0.0.1,localhost", "RUST_LOG": "error"})
        self.proc = await asyncio.create_subprocess_exec(
            self.binary, "app-server", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env,
            cwd=str(self.home / "work"), limit=64 * 1024 * 1024)
        self._reader = asyncio.create_task(self._read())
        await self.request("initialize", {"clientInfo": {"name": "bare", "version": "1"},
                                          "capabilities": {"experimentalApi": True}})
        self.send({"method": "initialized"})
        result = await self.request("thread/start", {
            "cwd": str(self.home / "work"), "approvalPolicy": "never", "sandbox": "read-only",
            "environments": [], "ephemeral": True,
            "dynamicTools": dynamic_tools(self.functions)})
        self.thread_id = result["result"]["thread"]["id"]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self.proc.wait()
        self._reader.cancel()
        shutil.rmtree(self.home, ignore_errors=True)

    def send(self, message: Json) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())

    async def request(self, method: str, params: Json) -> Json:
        rid = self._next
        self._next += 1
        fut: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        self.send({"id": rid, "method": method, "params": params})
        return await asyncio.wait_for(fut, 60)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            self.printed.append(msg)
            if "method" not in msg and msg.get("id") in self._waiting:
                self._waiting.pop(msg["id"]).set_result(msg)
            async with self._arrived:
                self._arrived.notify_all()

    async def wait_for(self, method: str, start: int = 0, within_s: float = 60,
                       **match: Any) -> Json:
        """The first printed message (from index ``start``) with this method whose params hold
        ``match``."""
        async def found() -> Json:
            async with self._arrived:
                while True:
                    for msg in self.printed[start:]:
                        p = msg.get("params") or {}
                        if msg.get("method") == method and all(p.get(k) == v
                                                               for k, v in match.items()):
                            return msg
                    await self._arrived.wait()
        return await asyncio.wait_for(found(), within_s)

    async def turn(self, items: list[Json]) -> str:
        reply = await self.request("turn/start", {"threadId": self.thread_id, "input": items})
        return str(reply["result"]["turn"]["id"])

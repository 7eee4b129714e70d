"""The MCP bridge: Core's public functions as Claude Code tools whose results come from Core.

Claude Code starts this as a stdio MCP server (``--mcp-config`` names ``python -m
runtimes.claude.mcp --socket PATH --tools FILE``). It speaks MCP's JSON-RPC, one message a
line: ``initialize`` (the client's protocol version is echoed), ``tools/list`` (the configured
public functions), ``tools/call``. A call is relayed to the live Runtime over the Unix socket
``PATH`` as one JSON line ``{"tool_use_id", "name", "arguments"}`` — Claude Code 2.1.328 puts the
model's ``tool_use`` id in ``params._meta["claudecode/toolUseId"]`` — and the server blocks until
the Runtime answers with ``{"content": [MCP blocks], "isError": bool}``: the ``function_result``
Core delivered. Nothing here decides a result; no answer (the Runtime gone) is an error result
that says so.

Pure standard library, so it starts fast inside the harness process tree.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
from typing import Any

TOOL_USE_ID_META = "claudecode/toolUseId"
_write_lock = threading.Lock()


def _send(msg: dict[str, Any]) -> None:
    line = json.dumps(msg, separators=(",", ":")) + "\n"
    with _write_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def relay(socket_path: str, tool_use_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    """Hand one call to the Runtime and wait for Core's result (no timeout: the Runtime ends
    the harness process when it gives up on a call)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(socket_path)
        s.sendall((json.dumps({"tool_use_id": tool_use_id, "name": name,
                               "arguments": arguments}) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            buf += chunk
    if not buf.strip():
        return {"content": [{"type": "text", "text": "the Core Runtime did not answer"}],
                "isError": True}
    answer: dict[str, Any] = json.loads(buf)
    return answer


def _call(socket_path: str, req_id: Any, params: dict[str, Any]) -> None:
    raw_meta = params.get("_meta")
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    try:
        result = relay(socket_path, meta.get(TOOL_USE_ID_META), str(params.get("name")),
                       params.get("arguments"))
    except OSError as e:
        result = {"content": [{"type": "text", "text": f"the Core Runtime is unreachable: {e}"}],
                  "isError": True}
    _send({"jsonrpc": "2.0", "id": req_id, "result": result})


def serve(socket_path: str, tools: list[dict[str, Any]]) -> None:
    listed = [{"name": t["name"], "description": t.get("description", ""),
               "inputSchema": t.get("parameters") or {"type": "object"}} for t in tools]
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict) or "id" not in msg or "method" not in msg:
            continue  # notifications and responses need no answer
        method, req_id = msg["method"], msg["id"]
        raw_params = msg.get("params")
        params: dict[str, Any] = raw_params if isinstance(raw_params, dict) else {}
        if method == "initialize":
            _send({"jsonrpc": "2.0", "id": req_id, "result": {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "session-core", "version": "1"}}})
        elif method == "tools/list":
            _send({"jsonrpc": "2.0", "id": req_id, "result": {"tools": listed}})
        elif method == "tools/call":
            threading.Thread(target=_call, args=(socket_path, req_id, params),
                             daemon=True).start()
        elif method == "ping":
            _send({"jsonrpc": "2.0", "id": req_id, "result": {}})
        else:
            _send({"jsonrpc": "2.0", "id": req_id,
                   "error": {"code": -32601, "message": f"method not found: {method}"}})


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m runtimes.claude.mcp")
    p.add_argument("--socket", required=True)
    p.add_argument("--tools", required=True, help="JSON file: [{name, description, parameters}]")
    args = p.parse_args(argv)
    with open(args.tools, encoding="utf-8") as f:
        tools = json.load(f)
    serve(args.socket, tools)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

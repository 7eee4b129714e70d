"""How the real Claude Code binary is started (one place: the live Runtime, the golden recorder,
the tests and the bench use it).

``claude -p --input-format stream-json --output-format stream-json --verbose`` reads native user
messages on stdin and prints one JSON record a line. It talks to ``ANTHROPIC_BASE_URL`` (the
scripted model server in tests, the provider in production) with ``ANTHROPIC_API_KEY``; a private
``HOME`` keeps it off the operator's settings; ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1``
stops update checks and telemetry; ``ENABLE_TOOL_SEARCH=false`` lists MCP tools to the model
directly instead of behind ``ToolSearch``.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

MCP_SERVER = "core"  # the model sees Core's public functions as mcp__core__<name>
DEFAULT_BUILTIN_TOOLS = ("Task",)  # subagents only: no shell, no file tools


def default_binary() -> str:
    """``$CLAUDE_BIN``, else the cached install (``python -m deploy.local.stack install``),
    else PATH."""
    env = os.environ.get("CLAUDE_BIN")
    if env:
        return env
    root = Path(__file__).resolve().parents[2] / "deploy" / "local"
    try:
        sys.path.insert(0, str(root))
        import stack  # type: ignore[import-not-found]

        cached = Path(stack.harness_bin("claude"))
        if cached.exists():
            return str(cached)
    except Exception:
        pass
    finally:
        if sys.path and sys.path[0] == str(root):
            sys.path.pop(0)
    return shutil.which("claude") or "claude"


def die_with_parent() -> None:
    """``preexec_fn``: the harness gets SIGKILL when the Runtime dies (even by ``kill -9``), so
    no orphaned ``claude`` outlives its Runtime (Linux ``prctl(PR_SET_PDEATHSIG)``)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def mcp_tool(name: str) -> str:
    return f"mcp__{MCP_SERVER}__{name}"


@dataclass(frozen=True)
class ClaudeSettings:
    """A Claude Code process's configuration (``session-core runtime --engine real``)."""

    model_base_url: str
    api_key: str = "session-core-local"  # production: from a Secret (ANTHROPIC_API_KEY)
    model: str | None = None
    images: bool = True  # False for a text-only model (--no-images)
    binary: str = field(default_factory=default_binary)
    builtin_tools: Sequence[str] = DEFAULT_BUILTIN_TOOLS
    replay_user_messages: bool = True


def command(settings: ClaudeSettings, *, mcp_config: Path | None, tools: Sequence[str],
            session_id: str | None = None) -> list[str]:
    cmd = [settings.binary, "-p", "--input-format", "stream-json", "--output-format",
           "stream-json", "--verbose", "--no-session-persistence",
           "--tools", ",".join(settings.builtin_tools)]
    if settings.replay_user_messages:
        cmd.append("--replay-user-messages")
    if settings.model:
        cmd += ["--model", settings.model]
    if session_id:
        cmd += ["--session-id", session_id]
    if mcp_config is not None:
        cmd += ["--mcp-config", str(mcp_config), "--strict-mcp-config"]
    allowed = [mcp_tool(t) for t in tools] + list(settings.builtin_tools)
    if allowed:
        cmd += ["--allowedTools", ",".join(allowed)]
    return cmd


def environment(settings: ClaudeSettings, home: Path,
                base: Mapping[str, str] | None = None) -> dict[str, str]:
    src = dict(os.environ if base is None else base)
    env = {k: v for k, v in src.items() if not k.startswith(("ANTHROPIC_", "CLAUDE_"))}
    env.update({
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": settings.model_base_url,
        "ANTHROPIC_API_KEY": settings.api_key,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "ENABLE_TOOL_SEARCH": "false",
        "DISABLE_AUTOUPDATER": "1",
    })
    return env

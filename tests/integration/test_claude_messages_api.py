"""The real Claude Code 2.1.328 completes a Turn against the scripted Messages API."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from runtimes.claude import process as claude_process
from scripted_model.server import running
from tests.support.skips import unavailable

if not Path(claude_process.default_binary()).exists():
    unavailable("claude is not installed (python3 -m deploy.local.stack install)", module=True)


def test_real_claude_completes_a_turn_against_the_scripted_messages_api(tmp_path: Path) -> None:
    with running() as server:
        server.scripts.register("KEY-msgapi", [[{"text": "scripted answer"}]])
        settings = claude_process.ClaudeSettings(model_base_url=server.url)
        cmd = claude_process.command(settings, mcp_config=None, tools=[])
        line = json.dumps({"type": "user", "message": {"role": "user", "content": [
            {"type": "text", "text": "KEY-msgapi hello"}]}, "parent_tool_use_id": None,
            "session_id": "", "uuid": str(uuid.uuid4())})
        done = subprocess.run(cmd, input=line + "\n", capture_output=True, text=True, timeout=90,
                              env=claude_process.environment(settings, tmp_path), cwd=tmp_path,
                              check=False)
        records = [json.loads(x) for x in done.stdout.splitlines() if x.strip()]
        result = [r for r in records if r.get("type") == "result"]
        assert result, done.stderr[-2000:]
        assert result[-1]["subtype"] == "success"
        assert result[-1]["result"] == "scripted answer"
        answered = server.scripts.recorded("KEY-msgapi")
        assert len(answered) == 1
        assert answered[0].path == "/v1/messages" and answered[0].body["stream"] is True
        texts = json.dumps(answered[0].body["messages"])
        assert "KEY-msgapi hello" in texts

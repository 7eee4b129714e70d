"""``session-core demo`` (``make run``'s tour, ``make demo-check`` in CI) fails unless every step
it prints held — here its step 2's wait for the result's Turn and its step 3: Claude Code refuses
the whitespace-only message with 400 ``unsupported_or_invalid_configuration`` and Codex stores it
exactly as sent. The CLI the demo drives is replaced by a scripted one (no model server: the
simulated-Runtime path of the demo)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from demo import tour as demo

REFUSED = (1, "error 400 unsupported_or_invalid_configuration: whitespace-only text "
              "(param: input)\n")


def fake_cli(refusal: tuple[int, str], result_rc: int = 0, stored: str = demo.WHITESPACE
             ) -> Any:
    def cli(*args: str, check: bool = True, show: bool = True
            ) -> subprocess.CompletedProcess[str]:
        cmd, rest = args[0], list(args[1:])
        rc, out, err = 0, "", ""
        if cmd == "create":
            harness, text = rest[rest.index("--harness") + 1], rest[rest.index("--text") + 1]
            if text == demo.WHITESPACE and harness == "claude_code":
                rc, err = refusal
            else:
                out = json.dumps({"id": f"s_{harness}_{text == demo.WHITESPACE}"})
        elif cmd == "items":
            sid = rest[0]
            items: list[dict[str, Any]] = []
            if sid == "s_codex_False":
                items = [{"type": "function_call", "call_id": "c1"}]
            elif sid == "s_codex_True":
                items = [{"type": "message", "content": [{"type": "input_text",
                                                          "text": stored}]}]
            out = json.dumps({"items": items, "has_more": False})
        elif cmd == "call":
            out = json.dumps({"state": "applied"})
        elif cmd == "result":
            rc = result_rc
        if check and rc != 0:
            raise SystemExit(f"demo: command failed ({rc}): {' '.join(args)}")
        return subprocess.CompletedProcess(list(args), rc, out, err)
    return cli


# (Claude Code's answer to whitespace, the result's exit code, what Codex stored) → the failure
CASES = [
    ((REFUSED, 0, demo.WHITESPACE), None),
    (((0, ""), 0, demo.WHITESPACE), "3: Claude Code's whitespace-only message was not refused"),
    (((1, "error 422 invalid_request: nope\n"), 0, demo.WHITESPACE),
     "3: Claude Code's whitespace-only message was not refused"),
    (((2, "cannot reach the API\n"), 0, demo.WHITESPACE),
     "3: Claude Code's whitespace-only message was not refused"),
    ((REFUSED, 0, ""), "3: Codex's message is not stored as sent"),
    ((REFUSED, 1, demo.WHITESPACE), "2: the result's Turn did not end within 30 s"),
]


@pytest.mark.parametrize(("world", "failure"), CASES)
def test_the_demo_fails_unless_every_step_held(
        monkeypatch: pytest.MonkeyPatch, world: tuple[tuple[int, str], int, str],
        failure: str | None) -> None:
    monkeypatch.delenv("SESSION_CORE_MODEL_SERVER", raising=False)
    monkeypatch.setattr(demo, "_cli", fake_cli(*world))
    if failure is None:
        demo.main([])
        return
    with pytest.raises(SystemExit, match="demo: FAILED") as got:
        demo.main([])
    assert failure in str(got.value), got.value

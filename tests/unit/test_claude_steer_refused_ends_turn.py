"""A steer the Claude Runtime refuses while its Turn runs ends that native Turn too (issue 57
item 8).

Primary spec: "A text-only adapter rejects image parts instead of dropping them"; whitespace-only
text is not runnable on Claude Code. A refused steer without a refusal code makes Core fail its
Turn (the dispatcher's rule for every other refusal). Before, the native Turn went on: its later
function calls and its end landed on a Turn Core showed as failed. Now the Runtime interrupts
the native Turn when it refuses a steer of it, so Core and the harness agree that it ended."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from runtimes.claude.live import ClaudeLive
from runtimes.claude.state import Session
from tests.unit.test_real_claude_records import live, session, turn


def steer(text_parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"delivery_id": "dlv_2", "runtime_id": "rt_1", "session_id": "session_a",
            "turn_id": "turn_1", "kind": "steer",
            "messages": [{"role": "user", "content": text_parts}]}


def run_steer(h: ClaudeLive, s: Session, d: dict[str, Any]) -> list[dict[str, Any]]:
    written: list[dict[str, Any]] = []

    async def write(_s: Session, record: dict[str, Any]) -> None:
        written.append(record)

    h._write = write  # type: ignore[method-assign]
    h._spawn_task = lambda coro: coro.close()  # type: ignore[method-assign,assignment]
    asyncio.run(h._messages(s, d))
    return written


PNG = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
       "z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
CASES = {
    "whitespace-only": [{"type": "input_text", "text": " \n\t"}],
    "image on a text-only model": [{"type": "input_text", "text": "see"},
                                   {"type": "input_image", "image_url": PNG}],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_refused_steer_ends_the_running_native_turn(tmp_path: Path, case: str) -> None:
    h, out = live(tmp_path)
    h.options.images = False  # a text-only model (--no-images)
    t = turn()
    s = session(tmp_path, t)
    written = run_steer(h, s, steer(CASES[case]))
    [refusal] = [r["refusal"] for r in out if r.get("refusal")]
    assert refusal["kind"] == "steer" and refusal.get("code") is None  # Core fails its Turn
    # … and the native Turn is interrupted, nothing of the steer written
    assert [w["type"] for w in written] == ["control_request"]
    assert written[0]["request"]["subtype"] == "interrupt"
    assert t.ending and t.end_reason is not None and case.split()[0] in t.end_reason

"""The conformance kit qualifies the real Claude Code adapter (an in-process Runtime with
``--engine real`` driving the real ``claude``): every applicable case passes, and a broken
driver (image dropped / text altered) fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime import claude_process
from services.runtime.conformance import KitOptions, render, run_kit
from shared.kafka import ensure_topics
from shared.settings import Settings
from shared.topics import topics_for

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not Path(claude_process.default_binary()).exists(),
                                 reason="claude is not installed")]


# Quarantined: in the CI run at 4343fa6 every case timed out (no Turn end, no native call within
# the kit's 15 s windows) although the same driver passes tests/e2e/real_claude and
# tests/integration/test_claude_live.py; with every case failing, the broken-driver rows would
# pass without proving anything. Open in issue 16 (docs/harnesses.md, "Conformance").
@pytest.mark.xfail(strict=False, reason="real Claude Code under the conformance kit: every case "
                   "times out (issue 16, open)")
@pytest.mark.parametrize(("corrupt", "must_fail"), [
    (None, set()),
    ("drop_image", {"message_images", "function_result_images"}),
    ("alter_text", {"message_images", "function_result_images", "text_exactness"}),
])
async def test_real_claude_adapter(settings: Settings, corrupt: str | None,
                                   must_fail: set[str]) -> None:
    await ensure_topics(settings, topics_for(settings))
    rt, results = await run_kit(settings, KitOptions(harness="claude_code", engine="real",
                                                     corrupt=corrupt))
    print(f"\n--corrupt {corrupt}\n" + render(rt, results))
    failed = {r.name for r in results if r.status == "FAIL"}
    if corrupt is None:
        assert not failed, [(r.name, r.detail) for r in results if r.status == "FAIL"]
        assert {r.name for r in results if r.status == "PASS"} >= {
            "message_images", "function_result_images", "text_exactness",
            "no_replay_synthetic_subagent", "receipt_within_10s", "claude_64_bound"}
    else:
        passed = {r.name for r in results if r.status == "PASS"}
        assert passed, "every case failed: the broken driver proved nothing"
        assert must_fail <= failed, [(r.name, r.status, r.detail) for r in results]

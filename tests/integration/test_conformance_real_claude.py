"""The conformance kit qualifies the real Claude Code adapter (an in-process Runtime with
``--engine real`` driving the real ``claude``): every applicable case passes, and a broken
driver (image dropped / text altered) fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtimes.claude import process as claude_process
from runtimes.conformance import KitOptions, render, run_kit
from shared.kafka import ensure_topics
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.skips import unavailable

pytestmark = pytest.mark.integration

if not Path(claude_process.default_binary()).exists():
    unavailable("claude is not installed (python3 -m deploy.local.stack install)", module=True)


# Claude Code 2.1.328 prints a failed result as one string: its text blocks joined by "\n" and
# then trimmed (the model receives the same trimmed string). text_exactness confirms a failed
# result whose whitespace is inside the text, and checks that one with whitespace at its ends —
# which never reaches the model exactly — is not confirmed (Core leaves it uncertain).
HARNESS_TRIMS_FAILED_RESULTS = "whitespace at the ends is trimmed by the harness and not confirmed"


@pytest.mark.parametrize(("corrupt", "must_fail"), [
    (None, set()),
    # the broken drivers prove the kit's power, not the adapter: make test-slow (README)
    pytest.param("drop_image", {"message_images", "function_result_images"},
                 marks=pytest.mark.slow),
    pytest.param("alter_text", {"message_images", "function_result_images", "text_exactness"},
                 marks=pytest.mark.slow),
])
async def test_real_claude_adapter(settings: Settings, corrupt: str | None,
                                   must_fail: set[str]) -> None:
    await ensure_topics(settings, topics_for(settings))
    rt, results = await run_kit(settings, KitOptions(harness="claude_code", engine="real",
                                                     corrupt=corrupt))
    print(f"\n--corrupt {corrupt}\n" + render(rt, results))
    failed = {r.name for r in results if r.status == "FAIL"}
    if corrupt is None:
        detail = {r.name: r.detail for r in results}
        assert failed == set(), [(r.name, r.detail) for r in results if r.status == "FAIL"]
        assert HARNESS_TRIMS_FAILED_RESULTS in detail["text_exactness"], detail
        assert "content: the joined text differs" in detail["text_exactness"], detail
        assert {r.name for r in results if r.status == "PASS"} == {
            "message_images", "function_result_images", "text_exactness", "release_handling",
            "no_replay_synthetic_subagent", "receipt_within_10s", "claude_64_bound",
            "interrupt"}
    else:
        passed = {r.name for r in results if r.status == "PASS"}
        assert passed, "every case failed: the broken driver proved nothing"
        assert must_fail <= failed, [(r.name, r.status, r.detail) for r in results]


async def test_real_claude_text_only_refuses_image_messages(settings: Settings) -> None:
    """A Runtime on a text-only model (``--no-images``) refuses an image message terminally
    and writes no part of it to the harness."""
    await ensure_topics(settings, topics_for(settings))
    rt, results = await run_kit(settings, KitOptions(
        harness="claude_code", engine="real", message_images=False,
        cases=("text_only_rejects_images", "message_images")))
    print("\n--no-message-images\n" + render(rt, results))
    assert not rt.message_images and not rt.function_result_images
    assert [(r.name, r.status) for r in results] == [
        ("text_only_rejects_images", "PASS"), ("message_images", "SKIP")]

"""The conformance kit qualifies the real Codex adapter (``--engine real``: the real
``codex app-server`` against a scripted model server): every applicable case passes, and an
adapter that corrupts what it sends fails the cases that check it."""

from __future__ import annotations

import pytest

from runtimes.conformance import KitOptions, render, run_kit
from runtimes.live import default_binary
from shared.kafka import ensure_topics
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.conformance import by_status
from tests.support.skips import unavailable

pytestmark = pytest.mark.integration

try:
    default_binary("codex")
except FileNotFoundError:  # pragma: no cover
    unavailable("codex is not installed (python3 -m deploy.local.stack install)", module=True)

CODEX_CASES = ("message_images", "function_result_images", "text_exactness",
               "release_handling", "no_replay_synthetic_subagent", "receipt_within_10s",
               "interrupt")


async def test_the_real_codex_adapter_passes_every_applicable_case(settings: Settings) -> None:
    await ensure_topics(settings, topics_for(settings))
    rt, results = await run_kit(settings, KitOptions(harness="codex", engine="real"))
    print("\n" + render(rt, results))
    st = by_status(results)
    assert rt.engine == "real"
    assert not st["FAIL"], [(r.name, r.detail) for r in results if r.status == "FAIL"]
    assert st["PASS"] == set(CODEX_CASES)


# the broken adapter (--corrupt) → the cases that must catch it; the kit's power, not the
# adapter's: make test-slow (README)
@pytest.mark.slow
@pytest.mark.parametrize(("corrupt", "must_fail"), [
    ("drop_image", {"message_images", "function_result_images"}),
    ("alter_text", {"message_images", "function_result_images", "text_exactness"}),
])
async def test_a_broken_real_adapter_fails(settings: Settings, corrupt: str,
                                           must_fail: set[str]) -> None:
    await ensure_topics(settings, topics_for(settings))
    rt, results = await run_kit(settings, KitOptions(
        harness="codex", engine="real", corrupt=corrupt,
        cases=("message_images", "function_result_images", "text_exactness")))
    print(f"\n--corrupt {corrupt}\n" + render(rt, results))
    assert by_status(results)["FAIL"] == must_fail


async def test_a_text_only_real_codex_refuses_image_messages(settings: Settings) -> None:
    """``--no-images``: an image message is refused terminally, no part of it reaches Codex."""
    await ensure_topics(settings, topics_for(settings))
    rt, results = await run_kit(settings, KitOptions(
        harness="codex", engine="real", message_images=False,
        cases=("text_only_rejects_images", "message_images")))
    assert not rt.message_images and not rt.function_result_images
    assert [(r.name, r.status) for r in results] == [
        ("text_only_rejects_images", "PASS"), ("message_images", "SKIP")]

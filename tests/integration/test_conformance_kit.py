"""The conformance kit qualifies the reference Runtime: every applicable case passes for a
correct harness, and a misbehaving switch fails exactly the cases it should."""

from __future__ import annotations

import pytest

from runtimes.conformance import KitOptions, run_kit
from shared.kafka import ensure_topics
from shared.settings import Settings
from shared.topics import topics_for
from tests.support.conformance import by_status

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
async def test_correct_runtime_passes_every_case(settings: Settings, harness: str) -> None:
    await ensure_topics(settings, topics_for(settings))
    _, results = await run_kit(settings, KitOptions(harness=harness))
    st = by_status(results)
    assert not st["FAIL"], [(r.name, r.detail) for r in results if r.status == "FAIL"]
    assert len(st["PASS"]) >= 5


@pytest.mark.slow  # the kit's power against a misbehaving Runtime: make test-slow (README)
@pytest.mark.parametrize(("switch", "must_fail"), [
    ({"drop_image": True}, {"function_result_images"}),
    ({"alter_text": True}, {"text_exactness"}),
])
async def test_misbehaving_runtime_fails_expected_cases(settings: Settings,
                                                         switch: dict[str, object],
                                                         must_fail: set[str]) -> None:
    await ensure_topics(settings, topics_for(settings))
    _, results = await run_kit(settings, KitOptions(harness="claude_code", switches=switch))
    st = by_status(results)
    assert must_fail <= st["FAIL"], [(r.name, r.status, r.detail) for r in results]
    if switch == {"drop_image": True}:
        assert st["FAIL"] == must_fail

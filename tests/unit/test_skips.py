"""A test that steps aside for a missing real part skips on a developer's machine and fails
under CI (tests/support/skips.py), and no test steps aside any other way."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.skips import unavailable

TESTS = Path(__file__).resolve().parents[1]
HELPER = TESTS / "support" / "skips.py"

# CI's value → whether a missing part fails (else it skips)
CI_VALUES = [(None, False), ("", False), ("0", False), ("false", False), ("true", True),
             ("1", True), ("TRUE", True)]


@pytest.mark.parametrize(("ci", "fails"), CI_VALUES)
def test_a_missing_part_skips_here_and_fails_under_ci(
        monkeypatch: pytest.MonkeyPatch, ci: str | None, fails: bool) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    outcome = pytest.fail.Exception if fails else pytest.skip.Exception
    with pytest.raises(outcome, match="PostgreSQL is missing"):
        unavailable("PostgreSQL is missing")


SKIP = re.compile(r"pytest\.skip\(|\.skipif\(|importorskip\(|pytest\.mark\.skip\b|"
                  r"allow_module_level")


def test_no_test_skips_but_through_the_helper() -> None:
    here = Path(__file__).resolve()
    found = [f"{p.relative_to(TESTS)}:{n}: {line.strip()}"
             for p in sorted(TESTS.rglob("*.py")) if p not in (HELPER, here)
             for n, line in enumerate(p.read_text().splitlines(), 1) if SKIP.search(line)]
    assert found == [], "skip through tests.support.skips.unavailable:\n" + "\n".join(found)

"""CI cannot skip silently: ``.ci/run`` builds what the tests need (Helm)
before ``make test``, runs every step unconditionally (no "SKIPPED" path: a step whose marker
selects no test fails, pytest exit 5), and every marker a Makefile target selects is used by
at least one test. The chart tests fail instead of skipping under ``CI`` when Helm is missing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import helm

ROOT = Path(__file__).resolve().parents[2]
CI = (ROOT / ".ci" / "run").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def _position(command: str) -> int:
    m = re.search(rf"^\s*make --no-print-directory {re.escape(command)}\b", CI, re.M)
    assert m is not None, f".ci/run does not run `make {command}`"
    return m.start()


def test_ci_builds_the_test_tools_before_the_tests() -> None:
    assert _position("deploy-tools") < _position("test")
    assert re.search(r"^deploy-tools:.*\n\t.*check\.sh tools", MAKEFILE, re.M)


@pytest.mark.parametrize("step", ["lint", "test", "deploy-check", "faults", "test-chaos",
                                  "test-hostile"])
def test_every_ci_step_runs_unconditionally(step: str) -> None:
    start = _position(step)
    line_start = CI.rfind("\n", 0, start) + 1
    assert CI[line_start:start].strip() == "", f"`make {step}` is inside a condition"
    before = CI[:start]
    # not inside an if/else block
    assert before.count("\nif ") + before.count("\n  if ") <= before.count("\nfi") + before.count(
        "\n  fi"), f"`make {step}` is inside an if block"
    assert "SKIPPED" not in CI and "skip " not in CI


@pytest.mark.parametrize("target", ["faults", "test-chaos", "test-hostile"])
def test_each_marker_target_selects_a_test(target: str) -> None:
    m = re.search(rf"^{target}:.*\n\t.*-m (\w+)", MAKEFILE, re.M)
    assert m is not None, f"the Makefile target {target} selects no marker"
    marker = m.group(1)
    used = [p for p in (ROOT / "tests").rglob("test_*.py")
            if re.search(rf"pytest\.mark\.{marker}\b", p.read_text())]
    assert used, f"no test is marked {marker}: `make {target}` would collect nothing"


def test_chart_tests_fail_without_helm_under_ci(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("HELM", raising=False)
    monkeypatch.setenv("SESSION_CORE_CACHE", str(tmp_path))
    monkeypatch.setattr(helm.shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="deploy-tools"):
        helm.render()

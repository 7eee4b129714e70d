"""The Helm chart rendered by the Helm that ``make deploy-tools`` builds (cached outside the
repo). Without it a chart test is skipped — except under ``CI``, which builds Helm before the
tests, so a skip there would hide a gap: there it fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.skips import unavailable

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "session-core"
# the one required value (no default image exists): as after `make image` and a push
IMAGE = "--set=image.repository=registry.example/sc"
Doc = dict[str, Any]


def helm_bin() -> str | None:
    cache = Path(os.environ.get("SESSION_CORE_CACHE", Path.home() / ".cache" / "session-core"))
    candidates = [os.environ.get("HELM"), str(cache / "bin" / "helm-v3.22.0"), shutil.which("helm")]
    return next((c for c in candidates if c and Path(c).is_file()), None)


def helm_template(*args: str) -> subprocess.CompletedProcess[str]:
    """``helm template`` of the chart with ``args``, whatever its exit code."""
    helm = helm_bin()
    if helm is None:  # CI builds Helm (make deploy-tools) before the tests: there it fails
        unavailable("helm is not built (make deploy-tools or make deploy-check builds it)")
    return subprocess.run([helm, "template", "t", str(CHART), *args], capture_output=True,
                          text=True, timeout=120, check=False)


def render(*args: str) -> list[Doc]:
    """The chart's objects with an image set and ``args``; rendering must succeed."""
    out = helm_template(IMAGE, *args)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]

"""The local store wrapper's own Go unit tests (``deploy/local/ferretdb/*_test.go``: the busy
handler's schedule, and its giving up at the connection's own ``busy_timeout`` — the
checkpointer's 50 ms, not FerretDB's 10 s), run by ``go test`` with the environment and flags the
install builds the wrapper with, so the packages it compiled are reused."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from deploy.local.stack.base import FERRET_SRC
from tests.support.skips import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)


def test_the_wrappers_go_tests_pass() -> None:
    go = shutil.which("go")
    if go is None:  # the install needs Go only to build; a cached binary runs without it
        unavailable("no Go on PATH")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    out = subprocess.run([go, "test", "-trimpath", "-count=1", "-v", "."], cwd=FERRET_SRC,
                         env=env, capture_output=True, text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # the tests ran (not "no test files")
    assert "--- PASS: TestBusyStepSchedule" in out.stdout, out.stdout[-3000:]
    assert "--- PASS: TestBusyHandlerGivesUpAtTheConnectionsTimeout" in out.stdout

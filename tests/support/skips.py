"""The one way a test steps aside for a real part this machine lacks (a harness binary,
PostgreSQL, the Kafka jars, FerretDB, Go, Helm, a stack the tests can stop): a skip on a
developer's machine, a **failure under CI** (``CI`` set, as ``.ci/run`` does), which installs
every one of them — there a skip would let CI pass without the part being tested.
``tests/unit/test_skips.py`` holds every other ``pytest.skip`` / ``skipif`` out of tests/."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def unavailable(reason: str, *, module: bool = False) -> NoReturn:
    """Skip (``module``: the whole module, at import) because ``reason``; under CI, fail."""
    if in_ci():
        pytest.fail(f"{reason} — CI=true: CI installs this, so a skip would hide a gap",
                    pytrace=False)
    pytest.skip(reason, allow_module_level=module)

"""How many examples the property and state-machine tests run.

`make test`, the everyday command, runs each at a fifth of its declared budget (at least 20
examples); `make test-slow` (CI too) runs them again at the declared budget, with
``SESSION_CORE_TEST_BUDGET=full``. Tests with no budget of their own follow the Hypothesis
profile that ``tests/conftest.py`` loads from the same variable (20 examples, or Hypothesis's 100).
Every Hypothesis test is marked ``deep`` (tests/conftest.py), which is how `make test-slow`
selects them."""

from __future__ import annotations

import os

FULL = os.environ.get("SESSION_CORE_TEST_BUDGET") == "full"
EVERYDAY_SHARE = 5
EVERYDAY_FLOOR = 20


def examples(declared: int) -> int:
    """The examples to run of a test that declares ``declared`` for its full budget."""
    return declared if FULL else max(EVERYDAY_FLOOR, declared // EVERYDAY_SHARE)

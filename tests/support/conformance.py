"""The conformance kit's results as the tests read them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def by_status(results: Iterable[Any]) -> dict[str, set[str]]:
    """The case names under PASS, FAIL and SKIP."""
    out: dict[str, set[str]] = {"PASS": set(), "FAIL": set(), "SKIP": set()}
    for r in results:
        out[r.status].add(r.name)
    return out

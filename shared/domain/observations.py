"""Classify native observations (CONTRACT §2) into the facts storage turns into Items: a
function call the harness made, and the end of a native Turn. Each harness classifies its own
records (``shared.domain.harnesses.<harness>.classify_all``); this module picks the harness.
Confirmation of function results is the receipt tracker's business
(``shared.domain.receipts``), not this module's."""

from __future__ import annotations

from typing import Any

from shared.domain.harnesses import module_for
from shared.domain.harnesses.facts import CallOpened, Fact, TurnEnded

__all__ = ["CallOpened", "Classified", "TurnEnded", "classify", "classify_all"]

Classified = CallOpened | TurnEnded | None


def classify_all(harness: str, native: Any) -> list[Fact]:
    """Every fact one native record carries: a Claude assistant record may hold several
    parallel ``tool_use`` blocks, each one call. An unknown harness's records carry none."""
    module = module_for(harness)
    if module is None or not isinstance(native, dict):
        return []
    return module.classify_all(native)


def classify(harness: str, native: Any) -> Classified:
    """The first fact a native record carries (``classify_all`` gives every one)."""
    facts = classify_all(harness, native)
    return facts[0] if facts else None

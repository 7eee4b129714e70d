"""``shared.store.in_served_by``: what a store's ``explain`` of a find by ``_id`` ``$in`` says
about serving it from the ``_id`` index (tests/integration/test_store_ids_in.py runs it on the
local store)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.store import in_served_by

CASES: list[tuple[str, dict[str, Any], bool | None]] = [
    ("MongoDB: no filterPushdown field, an index look-up",
     {"queryPlanner": {"winningPlan": {"stage": "FETCH", "inputStage": {"stage": "IXSCAN"}}},
      "ok": 1.0}, True),
    ("FerretDB, pushed down (the local stack's build)",
     {"queryPlanner": {"Plan": ["id=3 parent=0 notused=0 detail=SEARCH t USING INDEX t__id_"]},
      "filterPushdown": True, "ok": 1.0}, True),
    ("upstream FerretDB v1: not pushed down, a scan",
     {"queryPlanner": {"Plan": ["id=2 parent=0 notused=0 detail=SCAN t"]},
      "filterPushdown": False, "ok": 1.0}, False),
    ("FerretDB, a collection that does not exist yet: cannot say",
     {"queryPlanner": {}, "filterPushdown": False, "ok": 1.0}, None),
]


@pytest.mark.parametrize(("what", "explain", "want"), CASES, ids=[c[0] for c in CASES])
def test_in_served_by(what: str, explain: dict[str, Any], want: bool | None) -> None:
    assert in_served_by(explain) is want, what

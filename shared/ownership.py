"""Who owns which store collection — the one table of it.

A service writes only the collections it owns and creates their indexes itself. Another
service learns what it needs from records or from the owner's public Items, not by reading the
owner's private collections. One exception, declared here: admission serves storage's read
model (the public ``GET`` endpoints, the stored answer of an idempotent retry, a function
result's call), so it may *read* — never write — the storage collections listed in
``READ_GRANTS``. The binding a client sees comes from the Session document storage keeps (the
dispatcher's binding facts applied), not from the dispatcher's ``bindings``.
``tests/unit/test_collection_ownership.py`` greps every service's code against this table."""

from __future__ import annotations

OWNERS: dict[str, str] = {
    # storage: the single Item writer
    "sessions": "storage",
    "items": "storage",
    "calls": "storage",
    "idempotency": "storage",
    "image_chunks": "storage",
    "journal": "storage",
    "handovers": "storage",  # one mark per shard: were its Session documents handed over current
    # dispatcher: bindings, input waiting for a Runtime, the sweeper's lease
    "bindings": "dispatcher",
    "pending_deliveries": "dispatcher",
    "leases": "dispatcher",
    # receipt tracker: receipt windows, the calls it learnt from observations, verdicts
    "pending_receipts": "receipts",
    "receipt_calls": "receipts",
    "early_observations": "receipts",
    "receipt_verdicts": "receipts",
}

READ_GRANTS: dict[str, frozenset[str]] = {
    # journal: a Session document lags behind its Items; readers bring it up from the journal
    # entries that hold them (shared.itemstore.session_head)
    # (and a call's verdict is its journal entry, shared.itemstore.verdict)
    "admission": frozenset({"sessions", "items", "calls", "idempotency", "image_chunks",
                            "journal"}),
}


def owned_by(service: str) -> frozenset[str]:
    return frozenset(c for c, owner in OWNERS.items() if owner == service)

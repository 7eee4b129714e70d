"""Every document ``_id`` and journal key the services write or look up, built in one place.
FerretDB v1 indexes only primary keys, so these strings are how everything is found: a key
built two different ways is a document never found again.

Ids minted by Core (``session_…``, ``item_…``, ``turn_…``) hold no ``/`` or ``:``; a
client-minted id may hold anything, so it always comes last in a key."""

from __future__ import annotations


def item_key(session_id: str, sequence: int) -> str:
    """An Item document (``items``): sequences have no gaps, so any page of a Session's Items
    is a list of known primary keys."""
    return f"{session_id}/{sequence}"


def call_key(session_id: str, call_id: str) -> str:
    """A function call, its submission and its application (``calls``)."""
    return f"{session_id}/{call_id}"


def verdict_fact_id(session_id: str, call_id: str) -> str:
    """The fact id of a call's verdict (``function_call_application``), whoever gives it — the
    receipt tracker, or the dispatcher refusing the result. One per call, so the call's verdict
    is its journal entry ``fact_source(verdict_fact_id(…))`` (what ``GET …/tool_results`` reads)
    and a second verdict for the same call replays the first: the first verdict stands."""
    return f"rcpt:{session_id}/{call_id}"


def chunk_key(sha256: str, n: int) -> str:
    """The ``n``-th chunk of a stored image (``image_chunks``)."""
    return f"{sha256}:{n}"


def create_key(tenant: str, client_request_id: str) -> str:
    """Session-creation idempotency (``idempotency``) is per tenant: two tenants using the same
    ``client_request_id`` get two Sessions. Tenant names hold no ``:``."""
    return f"create:{tenant}:{client_request_id}"


def event_key(session_id: str, client_event_id: str) -> str:
    """Event idempotency (``idempotency``), per Session."""
    return f"event:{session_id}:{client_event_id}"


def pending_key(session_id: str, event_id: str) -> str:
    """An input waiting for an eligible Runtime (``pending_deliveries``): one per stored input,
    so a redelivered ``session.stored`` record finds its first place in the queue."""
    return f"{session_id}:{event_id}"


def request_source(request_id: str) -> str:
    """The journal key of an admitted request's decision."""
    return f"req:{request_id}"


def fact_source(fact_id: str) -> str:
    """The journal key of a fact's decision."""
    return f"fact:{fact_id}"


def skipped_source(source_key: str) -> str:
    """The journal's tombstone of a record that decided nothing (or was dead-lettered): it keeps
    a partition's journaled records a prefix of its log (``services/storage/decided.py``). Its
    own key, so the record may still be decided for real when it comes again."""
    return f"skip:{source_key}"


def state_step(session_id: str, version: int) -> str:
    """In the journal: the decision that took a Session to ``version`` without adding an Item
    (an agent message held, usage counted). Items show the roll-forward the way past a Session
    document written behind; this key shows it a step that left no Item (``roll_forward``)."""
    return f"step:{session_id}@{version}"


def item_source(journal_key: str, sequence: int) -> str:
    """An Item's ``source_key``: the journal entry that decided it, and its sequence (unique:
    the Items' ``source_key`` index)."""
    return f"{journal_key}#{sequence}"


def journal_key_of(item_source_key: str) -> str:
    """The journal entry an Item's ``source_key`` names (``item_source``)."""
    return item_source_key.rsplit("#", 1)[0]

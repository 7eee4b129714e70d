"""The store's keys are data: documents already written are found again only if every key is
built exactly as before. These pin the layout (a change here is a store migration)."""

from __future__ import annotations

from services.storage.domain.sessions import decide_create, decide_tool_result
from shared import storecodec, storekeys

SID = "session_" + "a" * 32


def test_the_key_layout_is_stable() -> None:
    assert storekeys.item_key(SID, 7) == f"{SID}/7"
    assert storekeys.call_key(SID, "toolu_1") == f"{SID}/toolu_1"
    assert storekeys.chunk_key("ab" * 32, 2) == "ab" * 32 + ":2"
    assert storekeys.create_key("acme", "c-1") == "create:acme:c-1"
    assert storekeys.event_key(SID, "e-1") == f"event:{SID}:e-1"
    assert storekeys.pending_key(SID, "evt_1") == f"{SID}:evt_1"
    assert storekeys.request_source("req_1") == "req:req_1"
    assert storekeys.fact_source("f1") == "fact:f1"


def test_decisions_and_documents_use_the_same_keys() -> None:
    """An Item document's _id, the message keys a decision records and the call it updates are
    the keys readers look up."""
    rec = {"request_id": "req_1", "session_id": SID, "harness": "codex", "placement": "none",
           "event_id": "evt_1", "fingerprint": "fp", "client_request_id": "c-1",
           "tenant": "acme",
           "messages": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}
    d = decide_create(rec, "2026-11-30T10:00:00Z")
    assert d.source_key == storekeys.request_source("req_1")
    assert [i["_id"] for i in d.idempotency] == [storekeys.create_key("acme", "c-1")]
    first = d.items[0]
    assert storecodec.item_doc(first, d.source_key)["_id"] == storekeys.item_key(SID, 1)
    assert d.state is not None
    state = d.state.__class__(**{**d.state.__dict__, "open_calls": {"toolu_1": "f"}})
    result = decide_tool_result(state, {
        "request_id": "req_2", "event_id": "evt_2", "call_id": "toolu_1",
        "submission": {"call_id": "toolu_1", "success": True}, "fields_present": [],
        "submission_fingerprint": "sfp", "fingerprint": "fp2"}, "2026-11-30T10:00:01Z")
    update = result.call_updates[0]
    assert update["_id"] == storekeys.call_key(SID, "toolu_1")
    out = result.items[0]
    assert update["set"]["output_item_key"] == storekeys.item_key(SID, out["sequence"])

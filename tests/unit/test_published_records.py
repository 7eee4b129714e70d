"""The records the dispatcher and the reference Runtime publish, built in one place
(``shared.records``, ``shared.domain.wire``), are what their consumers decode
with the one model of each record (``shared.messages``)."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from runtimes.app import RuntimeConfig, registration
from runtimes.harness import SimulatedHarness
from services.dispatcher.domain import binding
from services.storage.domain.sessions import decide_create, decide_tool_result
from shared import records
from shared.domain import receipts, wire
from shared.domain.poison import Poison
from shared.kafka import encode, now_rfc3339
from shared.messages import decode, internal, runtime

RT = "rt_" + "a" * 32
SID = "session_" + "b" * 32


def _decoded(kind: decode.RecordType[Any], rec: dict[str, Any]) -> Any:
    got = kind.decode(encode(rec))
    assert not isinstance(got, Poison), got
    assert got.value == rec
    return got.model


def test_a_registration_is_the_contract_and_what_the_registry_reads() -> None:
    cfg = RuntimeConfig(runtime_id=RT, harness="claude_code")
    rec = registration(cfg, SimulatedHarness(runtime_id=RT, harness="claude_code"), "ready")
    runtime.RuntimeRegistration.model_validate(rec)
    assert _decoded(decode.REGISTRATION, rec).status == "ready"
    assert binding.from_registration(rec).bridge_protocol == 3


def test_deliveries_are_the_contract_and_what_a_runtime_reads() -> None:
    messages = [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    start = wire.message_delivery(delivery_id="dlv_1", runtime_id=RT, session_id=SID,
                                  turn_id="turn_1", kind="start", messages=messages)
    result = wire.function_result_delivery(
        delivery_id="dlv_2", runtime_id=RT, session_id=SID, turn_id="turn_1", call_id="c1",
        name="f", success=True, output="ok", error=None)
    for rec in (start, result):
        TypeAdapter(runtime.RuntimeDelivery).validate_python(rec)
        assert _decoded(decode.DELIVERY, rec).runtime_id == RT


def test_observations_and_facts_are_what_storage_and_the_dispatcher_read() -> None:
    obs = records.observation_record(runtime_id=RT, session_id=SID, harness="codex",
                                     native={"method": "turn/completed"}, turn_id="turn_1",
                                     observation_id="obs_1")
    obs["observed_at"] = now_rfc3339()  # stamped as the Runtime's outbox publishes it
    assert _decoded(decode.OBSERVATION, obs).native == {"method": "turn/completed"}
    fact = records.fact_record(SID, "dsp:x", {"kind": "turn", "state": "failed",
                                              "turn_id": "turn_1", "reason": "r"})
    assert _decoded(decode.FACT, fact).kind == "turn"
    control = records.control_record(RT, {"replay": True})
    assert _decoded(decode.CONTROL, control).set == {"replay": True}


def test_the_schema_names_the_domain_uses_are_the_records_ones() -> None:
    assert wire.DELIVERY_SCHEMA == records.DELIVERY
    assert binding.REGISTRATION_SCHEMA == records.REGISTRATION
    assert receipts.OBSERVATION_SCHEMA == records.OBSERVATION


def test_stored_inputs_are_what_the_dispatcher_reads() -> None:
    """Storage's ``session.stored`` records (services.storage.domain.sessions) decode as
    ``Stored``."""
    created = decide_create({
        "request_id": "req_1", "session_id": SID, "harness": "codex", "placement": "none",
        "event_id": "evt_1", "fingerprint": "fp",
        "messages": [{"role": "user", "content": [{"type": "input_text", "text": " hi "}]}]},
        "2026-11-30T10:00:00Z")
    assert created.to_deliver is not None and created.state is not None
    start = _decoded(decode.STORED, records.stored_record(created.to_deliver))
    assert isinstance(start, internal.StoredMessages) and start.kind == "start"
    state = created.state.__class__(**{**created.state.__dict__, "open_calls": {"c1": "f"}})
    result = decide_tool_result(state, {
        "request_id": "req_2", "event_id": "evt_2", "call_id": "c1",
        "submission": {"call_id": "c1", "success": True, "output": "ok"},
        "fields_present": ["output"], "submission_fingerprint": "sfp", "fingerprint": "fp2"},
        "2026-11-30T10:00:01Z")
    assert result.to_deliver is not None
    got = _decoded(decode.STORED, records.stored_record(result.to_deliver))
    assert isinstance(got, internal.StoredResult) and got.submission.success is True

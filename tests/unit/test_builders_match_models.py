"""Every builder of a record — the services', the Runtime's (``runtimes/``), the test doubles'
(``tests/support/``) and the benchmarks' — writes what the record's one model
(``shared.messages``) decodes: each record contract-complete, so none goes to the DLQ for a
missing field (issue 60: one model per record, which builders are checked against)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import receipts_deadlines
from runtimes import live
from runtimes.app import RuntimeConfig, registration
from runtimes.harness import SimulatedHarness
from runtimes.outbox import _stamped
from services.storage.domain.sessions import decide_create
from shared import records
from shared.domain import wire
from shared.domain.poison import Poison
from shared.kafka import encode, now_rfc3339
from shared.messages import decode
from shared.settings import Settings
from tests.support import system
from tests.support.fakes import receipts as fakes

RT = "rt_" + "a" * 32
SID = "session_" + "b" * 32
TEXT = [{"type": "input_text", "text": " hi "}]


def decoded(kind: decode.RecordType[Any], rec: dict[str, Any]) -> Any:
    got = kind.decode(encode(rec))
    assert not isinstance(got, Poison), (got, rec)
    assert got.value == rec
    return got.model


def test_registrations() -> None:
    for harness in ("codex", "claude_code", "minimax_code"):
        cfg = RuntimeConfig(runtime_id=RT, harness=harness)
        decoded(decode.REGISTRATION, registration(
            cfg, SimulatedHarness(runtime_id=RT, harness=harness), "ready"))
    decoded(decode.REGISTRATION, records.registration_record(
        runtime_id=RT, harness="codex", bridge_protocol=3, placements=["none"],
        message_images=True, function_result_images=False, status="draining",
        heartbeat_at=now_rfc3339()))
    test_runtime = system.TestRuntime(Settings(), "codex", runtime_id=RT)
    decoded(decode.REGISTRATION, test_runtime.registration())


def deliveries() -> list[dict[str, Any]]:
    return [
        wire.message_delivery(delivery_id="dlv_1", runtime_id=RT, session_id=SID,
                              turn_id="turn_1", kind="start",
                              messages=[{"role": "user", "content": TEXT}]),
        wire.function_result_delivery(delivery_id="dlv_2", runtime_id=RT, session_id=SID,
                                      turn_id="turn_1", call_id="c1", name="f", success=False,
                                      output=TEXT, error="boom"),
        wire.interrupt_delivery(delivery_id="dlv_3", runtime_id=RT, session_id=SID,
                                turn_id="turn_1", reason="refused"),
        receipts_deadlines.delivery(1, SID, "b"),
        fakes.delivery(SID, "c1"),
    ]


@pytest.mark.parametrize("rec", deliveries(), ids=lambda r: str(r["kind"]))
def test_deliveries(rec: dict[str, Any]) -> None:
    assert type(decoded(decode.DELIVERY, rec)).__name__ != "DeliveryEnvelope"


def test_observations_as_the_runtime_publishes_them() -> None:
    """What the simulated harness and the live drivers build, stamped by the outbox."""
    harness = SimulatedHarness(runtime_id=RT, harness="codex")
    start, result, interrupt = deliveries()[:3]
    emitted = [e.record for d in (start, result, interrupt) for e in harness.handle(d, 0.0)]
    emitted += [e.record for e in harness.handle({**start, "delivery_id": "dlv_9",
                                                  "kind": "resume"}, 0.0)]
    assert any(r.get("refusal") for r in emitted) and any(r.get("native") for r in emitted)
    emitted += [live.envelope(RT, "claude_code", SID, "turn_1", {"type": "result"}),
                live.refusal(RT, "claude_code", start, "no")]
    for rec in emitted:
        decoded(decode.OBSERVATION, _stamped(rec))


def test_observations_of_the_other_builders() -> None:
    decoded(decode.OBSERVATION, records.observation_record(
        runtime_id=RT, session_id=SID, harness="codex", native={"method": "turn/completed"},
        turn_id="turn_1", observation_id="obs_1", observed_at=now_rfc3339()))
    test_runtime = system.TestRuntime(Settings(), "claude_code", runtime_id=RT)
    decoded(decode.OBSERVATION, test_runtime.observation(SID, {"type": "result"}))
    for rec in (fakes.announced(SID, "c1"), fakes.receipt(SID, "c1"), fakes.refusal(SID, "c1"),
                fakes.codex_announced(SID, "c1"), fakes.codex_completed(SID, "c1", [])):
        decoded(decode.OBSERVATION, rec)


def test_items_as_storage_publishes_them() -> None:
    created = decide_create({
        "request_id": "req_1", "session_id": SID, "harness": "codex", "placement": "none",
        "event_id": "evt_1", "fingerprint": "fp",
        "messages": [{"role": "user", "content": TEXT}]}, "2026-11-30T10:00:00Z")
    assert created.items
    for item in created.items:
        decoded(decode.ITEM, records.item_record(item, "acme"))


def test_the_internal_records() -> None:
    decoded(decode.FACT, records.fact_record(SID, "dsp:x", {"kind": "turn"}))
    decoded(decode.CONTROL, records.control_record(RT, {"replay": True}))

"""The chaos verifier's one allowance for a broker outage (``chaosload.excuse_late``): a call's
``uncertain`` verdict because its window ran out — its receipt came after the window, or none came
in it — is excused only when the harness did apply the result (its native receipt is on
``runtime.observations``, by the tracker's own matcher: ``receipt_seen``) and its result was
acknowledged within one window before the broker went away, or while it was away."""

from __future__ import annotations

import pytest

from shared.domain.receipts import REASON_LATE, REASON_RELEASED, REASON_TIMEOUT
from tests.support.chaosload import (
    Input,
    Load,
    Verdict,
    _check_verdicts_and_turns,
    excuse_late,
    receipt_seen,
)
from tests.support.fakes.receipts import announced, delivery, receipt

OVERDUE = [REASON_LATE.format(late=5.5, window=10),
           # the tracker read the delivery already overdue (the Runtime got it only after the
           # broker's return): decided by the clock, then the receipt came — chaos run 2026-12-02
           REASON_TIMEOUT.format(window=10)]


def _late_verdict(load: Load, acked_at: float, cid: str, reason: str,
                  applied: bool = True) -> Verdict:
    run = load.runs[0]
    run.inputs.append(Input(0, "result", "f1", "idem", call_id=cid, acked_at=acked_at))
    items = [{"type": "function_call", "call_id": cid, "sequence": 1},
             {"type": "function_call_application", "call_id": cid, "sequence": 2,
              "state": "uncertain", "reason": reason}]
    v = Verdict(sent=1, acked=1, retried=0, lost=[], duplicated=[], gaps=[])
    _check_verdicts_and_turns(v, run, items)
    if applied:  # what ``check`` records when ``receipt_seen`` holds
        v.applied_late.add((run.index, cid))
    return v


@pytest.mark.parametrize("reason", OVERDUE, ids=["late", "timeout"])
def test_an_overdue_call_is_excused_only_around_the_outage(reason: str) -> None:
    away, back, window = 100.0, 115.0, 10.0
    for acked_at, excused in ((89.0, False), (90.0, True), (100.0, True), (115.0, True),
                              (115.5, False), (150.0, False)):
        load = Load("http://127.0.0.1:1", "key", "t")
        v = _late_verdict(load, acked_at, "call_1", reason)
        assert len(v.verdict_problems) == 1  # without the allowance it is a problem
        excuse_late(v, load, away, back, window)
        assert (v.verdict_problems == [], len(v.excused)) == (excused, int(excused)), acked_at
        if not excused:  # the problem says how far from the outage the result was acknowledged
            assert "s from the broker's return" in v.verdict_problems[0]


def test_an_uncertain_verdict_for_another_reason_is_never_excused() -> None:
    load = Load("http://127.0.0.1:1", "key", "t")
    run = load.runs[0]
    run.inputs.append(Input(0, "result", "f1", "idem", call_id="c", acked_at=100.0))
    items = [{"type": "function_call", "call_id": "c", "sequence": 1},
             {"type": "function_call_application", "call_id": "c", "sequence": 2,
              "state": "uncertain", "reason": REASON_RELEASED}]
    v = Verdict(sent=1, acked=1, retried=0, lost=[], duplicated=[], gaps=[])
    _check_verdicts_and_turns(v, run, items)
    excuse_late(v, load, 100.0, 115.0, 10.0)
    assert len(v.verdict_problems) == 1 and v.excused == []


@pytest.mark.parametrize("reason", OVERDUE, ids=["late", "timeout"])
def test_an_overdue_call_whose_result_the_harness_never_applied_is_not_excused(
        reason: str) -> None:
    load = Load("http://127.0.0.1:1", "key", "t")
    v = _late_verdict(load, 105.0, "call_1", reason, applied=False)
    excuse_late(v, load, 100.0, 115.0, 10.0)
    assert v.excused == [] and len(v.verdict_problems) == 1
    assert "no native receipt" in v.verdict_problems[0]


def test_receipt_seen_takes_only_the_calls_own_receipt_of_the_delivered_result() -> None:
    sid, cid = "s1", "toolu_1"
    deliveries = [delivery(sid, cid, "ok")]
    assert receipt_seen(sid, cid, deliveries, [announced(sid, cid), receipt(sid, cid, "ok")])
    assert not receipt_seen(sid, cid, deliveries, [announced(sid, cid)])  # no receipt
    assert not receipt_seen(sid, cid, deliveries, [receipt(sid, cid, "ok")])  # never announced
    assert not receipt_seen(sid, cid, deliveries,  # another text than delivered
                            [announced(sid, cid), receipt(sid, cid, "other")])
    assert not receipt_seen(sid, cid, deliveries,  # another native session
                            [announced(sid, cid), receipt(sid, cid, "ok", native_session="n2")])
    assert not receipt_seen(sid, cid, [], [announced(sid, cid), receipt(sid, cid, "ok")])

"""The chaos verifier's one allowance for a broker outage (``chaosload.excuse_late``): a call's
``uncertain`` verdict for a receipt after the window is excused only when its result was
acknowledged within one window before the broker went away, or while it was away."""

from __future__ import annotations

from shared.domain.receipts import REASON_LATE
from tests.support.chaosload import Input, Load, Verdict, _check_verdicts_and_turns, excuse_late


def _late_verdict(load: Load, acked_at: float, cid: str) -> Verdict:
    run = load.runs[0]
    run.inputs.append(Input(0, "result", "f1", "idem", call_id=cid, acked_at=acked_at))
    items = [{"type": "function_call", "call_id": cid, "sequence": 1},
             {"type": "function_call_application", "call_id": cid, "sequence": 2,
              "state": "uncertain", "reason": REASON_LATE.format(late=5.5, window=10)}]
    v = Verdict(sent=1, acked=1, retried=0, lost=[], duplicated=[], gaps=[])
    _check_verdicts_and_turns(v, run, items)
    return v


def test_a_late_receipt_is_excused_only_around_the_outage() -> None:
    away, back, window = 100.0, 115.0, 10.0
    for acked_at, excused in ((89.0, False), (90.0, True), (100.0, True), (115.0, True),
                              (115.5, False), (150.0, False)):
        load = Load("http://127.0.0.1:1", "key", "t")
        v = _late_verdict(load, acked_at, "call_1")
        assert len(v.verdict_problems) == 1  # without the allowance it is a problem
        excuse_late(v, load, away, back, window)
        assert (v.verdict_problems == [], len(v.excused)) == (excused, int(excused)), acked_at


def test_an_uncertain_verdict_for_another_reason_is_never_excused() -> None:
    load = Load("http://127.0.0.1:1", "key", "t")
    run = load.runs[0]
    run.inputs.append(Input(0, "result", "f1", "idem", call_id="c", acked_at=100.0))
    items = [{"type": "function_call", "call_id": "c", "sequence": 1},
             {"type": "function_call_application", "call_id": "c", "sequence": 2,
              "state": "uncertain", "reason": "released without confirmation"}]
    v = Verdict(sent=1, acked=1, retried=0, lost=[], duplicated=[], gaps=[])
    _check_verdicts_and_turns(v, run, items)
    excuse_late(v, load, 100.0, 115.0, 10.0)
    assert len(v.verdict_problems) == 1 and v.excused == []

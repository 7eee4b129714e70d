"""The chaos verifier's one allowance for a broker outage (``chaosload.excuse_late``): a call's
``uncertain`` verdict because its window ran out — its receipt came after the window, or none came
in it — is excused only when the harness did apply the result (its native receipt is on
``runtime.observations``, judged by the checker's own rules: ``receipt_counts``) and its result
was acknowledged within one window before the broker went away, or while it was away. And the
checker's counts from the harness's records: receipts per call (a result applied twice) and
each Turn's end as Core and the harness report it."""

from __future__ import annotations

import pytest

from shared.domain.receipts import REASON_LATE, REASON_RELEASED, REASON_TIMEOUT
from tests.support.chaosload import (
    Input,
    Load,
    Verdict,
    _check_verdicts_and_turns,
    excuse_late,
    receipt_counts,
    turn_disagreements,
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
    if applied:  # what ``check`` records when ``receipt_counts`` finds the receipt
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


def _obs(o: dict[str, object], n: int) -> dict[str, object]:
    return {**o, "observation_id": f"obs_{n}"}


def test_receipt_counts_take_only_the_calls_own_receipts_of_the_delivered_result() -> None:
    sid, cid = "s1", "toolu_1"
    items = [{"type": "function_call", "call_id": cid, "sequence": 1}]
    dl = [delivery(sid, cid, "ok")]
    ann = _obs(announced(sid, cid), 0)

    def count(deliveries: list[dict[str, object]], *obs: dict[str, object]) -> int:
        """Receipts of the call among its announcement and ``obs``."""
        return receipt_counts("claude_code", items, deliveries,
                              [ann, *(_obs(o, n + 1) for n, o in enumerate(obs))])[cid]

    assert count(dl, receipt(sid, cid, "ok")) == 1
    assert count(dl) == 0  # no receipt
    assert receipt_counts("claude_code", items, dl, [_obs(receipt(sid, cid, "ok"), 1)]
                          )[cid] == 0  # never announced
    assert count(dl, receipt(sid, cid, "other")) == 0  # another text than delivered
    assert count(dl, receipt(sid, cid, "ok", native_session="n2")) == 0  # another session
    assert count([], receipt(sid, cid, "ok")) == 0  # nothing delivered
    # applied twice: two records of the harness confirm the one result
    assert count(dl, receipt(sid, cid, "ok"), receipt(sid, cid, "ok", uuid="u-again")) == 2
    # the same observation read twice (a republication) is one receipt
    rec = _obs(receipt(sid, cid, "ok"), 7)
    assert receipt_counts("claude_code", items, dl, [ann, rec, rec])[cid] == 1


def test_turn_ends_core_and_the_harness_must_agree() -> None:
    def end(tid: str, status: str, n: int) -> dict[str, object]:
        return {"observation_id": f"obs_{n}", "turn_id": tid,
                "native": {"method": "turn/completed", "params": {"turn": {"status": status}}}}

    items = [{"type": "turn", "turn_id": "t1", "state": "started"},
             {"type": "turn", "turn_id": "t1", "state": "completed"},
             {"type": "turn", "turn_id": "t2", "state": "started"},
             {"type": "turn", "turn_id": "t2", "state": "failed"}]
    assert turn_disagreements("codex", items, [end("t1", "completed", 1),
                                               end("t2", "interrupted", 2)], "s0") == []
    assert turn_disagreements("codex", items, [end("t1", "completed", 1),
                                               end("t2", "completed", 2)], "s0") != []
    # a Turn Core failed with no end from the harness: the harness was killed in it
    assert turn_disagreements("codex", items, [end("t1", "completed", 1)], "s0") == []
    # a Turn Core completed with no end from the harness
    assert turn_disagreements("codex", items, [end("t2", "failed", 2)], "s0") != []
    # the reference Runtime's simulation prints the status flat in params
    flat = {"observation_id": "obs_9", "turn_id": "t1",
            "native": {"method": "turn/completed", "params": {"status": "completed"}}}
    assert turn_disagreements("codex", items[:2], [flat], "s0") == []
    assert turn_disagreements("codex", items, [end("t1", "completed", 1), end("t1", "completed", 3),
                                               end("t2", "failed", 2)], "s0") != []
    assert turn_disagreements("codex", items[:2], [end("t1", "completed", 1),
                                                   end("t9", "completed", 2)], "s0") != []

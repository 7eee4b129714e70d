"""The chaos suite's report (one row a fault: sent, lost, duplicated, time to recover…) and its
probe, a round trip through every service that says when the system has recovered."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import httpx

from tests.support.chaosload import Load, Verdict, create_retrying

API_KEY = "chaos-key"
# inputs sent at once just before each fault (spread over the Sessions), and how long after
# the burst began the fault hits: so that hundreds are in flight or being processed then
BURST = int(os.environ.get("CHAOS_BURST", "300"))
BURST_LEAD_S = float(os.environ.get("CHAOS_BURST_LEAD_S", "0.5"))
# every row must have at least this many inputs in flight at each fault: a loss that hits each
# in-flight input with probability 1/50 is then caught with 1 − 0.98^200 = 98.2 % in one run
MIN_IN_FLIGHT = int(os.environ.get("CHAOS_MIN_IN_FLIGHT", "200"))
MIN_POWER = 0.95


@dataclass
class Row:
    fault: str
    sent: int
    acked: int
    retried: int
    lost: int
    duplicated: int
    down_s: float
    recover_s: float | None
    answers: str
    steers_handed_over: int = 0
    delivered: str = "-"  # "delivered / acked (missing)"
    verdicts: str = "-"  # "calls: one verdict each (states)"
    turn_ends: str = "-"  # "Turns started / ended (never ended, failed)"
    allowed: str = "-"  # the answers the row allows from the fault on
    harness: str = "simulated (codex, claude_code)"  # whose Runtimes the load ran on
    in_flight: tuple[int, ...] = ()  # inputs in flight or being processed at each fault
    double_applied: int = 0  # calls with two or more native receipts
    turn_disagreements: int = 0  # Turns whose end Core and the harness do not agree on

    @property
    def power(self) -> float:
        """P(a 1-in-50 loss of in-flight inputs is caught): by the fewest in flight at a
        fault of the row (0 when none was measured)."""
        return p_detect(min(self.in_flight)) if self.in_flight else 0.0


def p_detect(n: int, rate: float = 1 / 50) -> float:
    """The probability that at least one of ``n`` independent checks catches a loss that hits
    each with probability ``rate``: 1 − (1 − rate)^n."""
    return 1 - (1 - rate) ** n


def table(rows: list[Row]) -> str:
    head = ("| fault injected | harness | in flight at the fault | inputs sent | lost | "
            "duplicated | double-applied | Turn-state disagreements | "
            "power to see a 1-in-50 in-flight loss | acked | retried (same id) | "
            "delivered (missing) | calls: verdicts | Turns started / ended | "
            "down (s) | time to recover (s) | "
            "steers handed over again | answers from the fault on | allowed |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r.fault} | {r.harness} | {' / '.join(map(str, r.in_flight)) or '-'} | {r.sent} | "
        f"{r.lost} | {r.duplicated} | {r.double_applied} | {r.turn_disagreements} | "
        f"{r.power:.3f} | {r.acked} | {r.retried} | "
        f"{r.delivered} | {r.verdicts} | {r.turn_ends} | "
        f"{r.down_s:.1f} | {'-' if r.recover_s is None else f'{r.recover_s:.1f}'} | "
        f"{r.steers_handed_over} | {r.answers} | {r.allowed} |\n" for r in rows)


async def burst_then(load: Load, fault: Callable[[], None]) -> float:
    """Send ``BURST`` inputs at once, and ``BURST_LEAD_S`` later run ``fault`` (in a thread:
    the burst goes on meanwhile). Returns the fault's wall-clock moment."""
    load.burst(BURST)
    await asyncio.sleep(BURST_LEAD_S)
    at = time.time()
    await asyncio.to_thread(fault)
    return at


def assert_power(fault: str, v: Verdict) -> None:
    """Every fault of the row met at least ``MIN_IN_FLIGHT`` inputs in flight, and the row's
    power to catch a 1-in-50 in-flight loss is at least ``MIN_POWER``."""
    assert v.in_flight and min(v.in_flight) >= MIN_IN_FLIGHT, (
        f"{fault}: inputs in flight at the fault(s) {v.in_flight}, need {MIN_IN_FLIGHT}")
    assert p_detect(min(v.in_flight)) >= MIN_POWER, v.in_flight


def make_row(fault: str, v: Verdict, down_s: float, recover_s: float | None,
             answers: Counter[str], allowed: Iterable[str], label: str = "",
             harness: str = "simulated (codex, claude_code)") -> Row:
    states = ", ".join(f"{k}×{n}" for k, n in sorted(v.verdicts.items(), key=str))
    return Row(
        fault=fault, sent=v.sent, acked=v.acked, retried=v.retried, lost=len(v.lost),
        duplicated=len(v.duplicated), down_s=down_s, recover_s=recover_s,
        answers=label + ", ".join(f"{k}×{n}" for k, n in sorted(answers.items())),
        steers_handed_over=v.handovers,
        delivered=f"{v.delivered} ({len(v.undelivered)})",
        verdicts=f"{v.calls}: {states or 'none'}"
                 + (f" ({len(v.verdict_problems)} wrong)" if v.verdict_problems else "")
                 + (f" ({len(v.excused)} overdue: the broker away)" if v.excused else ""),
        turn_ends=f"{v.turns} / {v.turns_ended}"
                  + (f" ({len(v.turn_problems)} wrong)" if v.turn_problems else ""),
        allowed=", ".join(sorted(allowed)), harness=harness, in_flight=tuple(v.in_flight),
        double_applied=len(v.double_applied), turn_disagreements=len(v.turn_disagreements))


async def probe(api: httpx.AsyncClient, budget: float = 180.0) -> float:
    """One end-to-end round trip through every service: create a Session whose message makes
    the Runtime open a call (admission → storage → dispatcher → Runtime → storage), answer it,
    and wait for the call's ``applied`` application (→ dispatcher → Runtime → receipts →
    storage). Retries like a client. Returns when done; raises after ``budget`` seconds."""
    t0 = time.monotonic()
    crid = str(uuid.uuid4())
    body = {"harness": "codex", "placement": "none", "client_request_id": crid,
            "input": f"probe {crid} call p {{}}"}
    sid = await create_retrying(api, body, t0, budget)
    call_id = None
    sent = False
    while True:
        assert time.monotonic() - t0 < budget, f"probe {sid}: not done in {budget}s"
        with contextlib.suppress(httpx.TransportError):
            r = await api.get(f"/v1/sessions/{sid}/items", params={"limit": 1000})
            if r.status_code == 200:
                items = r.json()["items"]
                for it in items:
                    if it["type"] == "function_call":
                        call_id = it["call_id"]
                    if it["type"] == "function_call_application":
                        assert it["state"] == "applied", it
                        return time.monotonic()
            if call_id is not None and not sent:
                r = await api.post(f"/v1/sessions/{sid}/events", json={
                    "type": "agent.session.input.tool_result", "call_id": call_id,
                    "success": True, "output": "probe", "client_event_id": f"p-{crid}"})
                sent = r.status_code == 202
        await asyncio.sleep(0.3)

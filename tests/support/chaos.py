"""The chaos suite's report (one row a fault: sent, lost, duplicated, time to recover…) and its
probe, a round trip through every service that says when the system has recovered."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from tests.support.chaosload import Verdict

API_KEY = "chaos-key"


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


def p_detect(n: int, rate: float = 1 / 50) -> float:
    """The probability that at least one of ``n`` independent checks catches a loss that hits
    each with probability ``rate``: 1 − (1 − rate)^n."""
    return 1 - (1 - rate) ** n


def table(rows: list[Row]) -> str:
    head = ("| fault injected | inputs sent | acked | retried (same id) | lost | duplicated | "
            "delivered (missing) | calls: verdicts | Turns started / ended | "
            "P(1-in-50 input loss caught) | down (s) | time to recover (s) | "
            "steers handed over again | answers from the fault on | allowed |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    return head + "".join(
        f"| {r.fault} | {r.sent} | {r.acked} | {r.retried} | {r.lost} | {r.duplicated} | "
        f"{r.delivered} | {r.verdicts} | {r.turn_ends} | {p_detect(r.acked):.1%} | "
        f"{r.down_s:.1f} | {'-' if r.recover_s is None else f'{r.recover_s:.1f}'} | "
        f"{r.steers_handed_over} | {r.answers} | {r.allowed} |\n" for r in rows)


def make_row(fault: str, v: Verdict, down_s: float, recover_s: float | None,
             answers: Counter[str], allowed: Iterable[str], label: str = "") -> Row:
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
        allowed=", ".join(sorted(allowed)))


async def probe(api: httpx.AsyncClient, budget: float = 180.0) -> float:
    """One end-to-end round trip through every service: create a Session whose message makes
    the Runtime open a call (admission → storage → dispatcher → Runtime → storage), answer it,
    and wait for the call's ``applied`` application (→ dispatcher → Runtime → receipts →
    storage). Retries like a client. Returns when done; raises after ``budget`` seconds."""
    t0 = time.monotonic()
    crid = str(uuid.uuid4())
    body = {"harness": "codex", "placement": "none", "client_request_id": crid,
            "input": f"probe {crid} call p {{}}"}
    sid = None
    while sid is None:
        with contextlib.suppress(httpx.TransportError):
            r = await api.post("/v1/sessions", json=body)
            if r.status_code == 201:
                sid = r.json()["id"]
                break
            assert r.status_code >= 500 or r.status_code == 429, r.text
        assert time.monotonic() - t0 < budget, "probe: no Session"
        await asyncio.sleep(0.5)
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

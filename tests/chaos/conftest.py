"""Chaos suite (``make test-chaos``, issue 10 parts 1–2): a private Kafka + FerretDB of its own
(it is killed here, so never a shared one), the four services and two reference Runtimes as real
processes, and the report table (fault, sent, lost, duplicated, time to recover) printed at the
end of the run and written to ``<pytest basetemp>/chaos-report.md``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chaos.load import Verdict
from tests.conftest import Stack, _local_stack
from tests.support.processes import Core, launch

API_KEY = "chaos-key"
RUNTIMES: dict[str, list[str]] = {
    "claude": ["--harness", "claude_code", "--placements", "none", "--turn-idle-ms", "800"],
    "codex": ["--harness", "codex", "--placements", "none", "--turn-idle-ms", "800"],
}
ROWS: list[Row] = []


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
                 + (f" ({len(v.verdict_problems)} wrong)" if v.verdict_problems else ""),
        turn_ends=f"{v.turns} / {v.turns_ended}"
                  + (f" ({len(v.turn_problems)} wrong)" if v.turn_problems else ""),
        allowed=", ".join(sorted(allowed)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if ROWS:
        terminalreporter.write_sep("=", "chaos report")
        terminalreporter.write(table(ROWS))


@pytest.fixture(scope="session")
def chaos_stack() -> Iterator[Stack]:
    # under SESSION_CORE_TEST_STATE_DIR when set, so .ci/run can stop it after a killed run
    pinned = os.environ.get("SESSION_CORE_TEST_STATE_DIR")
    state_dir = (Path(pinned) / "chaos" if pinned
                 else Path(tempfile.mkdtemp(prefix="session-core-chaos-")))
    st = _local_stack(state_dir, private=True)
    try:
        yield st
    finally:
        with contextlib.suppress(Exception):
            st.down()
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def chaos_core(chaos_stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Core]:
    env = {
        # a crashed storage / broker shows as 504 after this budget (the default, 10 s; it was
        # 5 s here, and a CPU-starved machine then showed 504s in rows whose fault is not on the
        # client's path — which the rows now refuse); the client retries
        "SESSION_CORE_STORAGE_REPLY_TIMEOUT_MS": "10000",
        "SESSION_CORE_BINDING_WAIT_TIMEOUT_S": "60",
    }
    c = launch(chaos_stack, tmp_path_factory.mktemp("chaos-logs"), RUNTIMES, API_KEY, env,
               prefix="c")
    try:
        yield c
    finally:
        c.stop_all()
        sys.stderr.write(f"\n[chaos] service logs in {c.log_dir}\n")


@pytest.fixture(scope="session")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    path = tmp_path_factory.getbasetemp() / "chaos-report.md"
    yield path
    if ROWS:
        path.write_text(table(ROWS))
        sys.stderr.write(f"\n[chaos] report table in {path}\n{table(ROWS)}")


@pytest.fixture
def record(report_file: Path) -> Callable[[Row], None]:
    def add(row: Row) -> None:
        ROWS.append(row)
        report_file.write_text(table(ROWS))
        sys.stderr.write(f"\n[chaos] {table([row])}")

    return add


@pytest.fixture
async def api(chaos_core: Core) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=chaos_core.base_url, timeout=15,
                                 headers={"Authorization": f"Bearer {API_KEY}"}) as c:
        yield c


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

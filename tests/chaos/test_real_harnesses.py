"""Chaos on the real binaries: Sessions on real ``codex app-server`` and real ``claude``
Runtimes (``--engine real``) against the scripted model server, and ``kill -9`` of the harness
processes mid-Turn and mid-function-result, of the Runtime processes mid-Turn (started again
under their ids), and of the model server mid-response (``tests/support/chaosreal.py``).
Afterwards, from outside, per harness: every input stored, published and delivered exactly
once (``chaosload.check``); every call exactly one verdict — ``applied`` exactly when the
harness printed the result's receipt (judged by ``tests/support/receipt_rules.py``, not the
product's matcher), else ``uncertain``, and only a call whose result was in flight at the fault
may be ``uncertain``; no result applied twice (the harness's records: two receipts of one call;
the model server's request log: one result twice in a request's history); every Turn ended in
the state Core and the harness agree on (a Turn the harness was killed in: failed, with no end
printed or the Runtime's ``synthesized`` failure); and each Session runs its next round on a
fresh harness afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.support.chaos import API_KEY, BURST_LEAD_S, Row, assert_power, make_row
from tests.support.chaosload import topic_ends, verify
from tests.support.chaosreal import (
    PAUSE_S,
    ModelProcess,
    RealLoad,
    applied_twice_by_the_model_log,
    real_probe,
)
from tests.support.processes import Core

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(900)]

SESSIONS = int(os.environ.get("CHAOS_REAL_SESSIONS", "4"))  # codex and claude alternating
# Sessions of their own that take a burst of messages just before the strike, and how many
# each: 4 per harness × 50 = 200 in flight per harness row (docs/chaos.md, "Real harnesses").
# 50 stays under Claude Code's 64 user messages per Turn: the bound's refusal fails Core's Turn
# while the harness may complete it natively — that protocol has tests of its own.
BURST_SESSIONS = int(os.environ.get("CHAOS_REAL_BURST_SESSIONS", "8"))
BURST = int(os.environ.get("CHAOS_REAL_BURST", "50"))
RUNTIMES = ("runtime-codex_real", "runtime-claude_real")
HARNESS = {"codex": "real codex", "claude_code": "real claude"}
DOWN_S = 3.0
OK = frozenset({"201", "202", "503", "504"})  # as every simulated row


def harness_pids(core: Core) -> list[int]:
    """The harness processes (``codex`` / ``claude`` executables) under the real Runtimes."""
    roots = {core.procs[n].pid for n in RUNTIMES if n in core.procs}
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0")[0].rsplit(b"/", 1)[-1]
        except OSError:
            continue
        if (b"codex" in argv0 or b"claude" in argv0) and _under(int(entry), roots):
            out.append(int(entry))
    return out


def _under(pid: int, roots: set[int]) -> bool:
    while pid > 1:
        if pid in roots:
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False


def signal_harnesses(core: Core, sig: int) -> int:
    pids = harness_pids(core)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return len(pids)


def kill_harnesses(core: Core) -> int:
    return signal_harnesses(core, signal.SIGKILL)


async def until_handed_over(core: Core, calls: set[str], budget: float = 30.0) -> int:
    """Until each Runtime has received the result delivery of every call in ``calls`` (its
    ``delivery.received`` log line names the call), then 1 s more for it to hand the result
    to its harness; how many it had received."""
    deadline = time.monotonic() + budget
    while True:
        got = set()
        for n in RUNTIMES:
            assert core.log_dir is not None
            for line in (core.log_dir / f"{n}.log").read_text(errors="replace").splitlines():
                if "delivery.received" in line:
                    got |= {c for c in calls if f'"call_id": "{c}"' in line}
        if got == calls or time.monotonic() > deadline:
            await asyncio.sleep(1.0)
            return len(got)
        await asyncio.sleep(0.2)


async def until_streaming(model: ModelProcess, load: RealLoad, budget: float) -> set[str]:
    """Until the fault round's pausing reply is streaming to every Session (or ``budget``
    seconds): the harnesses are then mid-Turn, waiting on the model. The scripts streaming."""
    want = {load.key(r, load.fault_round) for r in load.round_runs}
    deadline = time.monotonic() + budget
    while True:
        now = await asyncio.to_thread(model.streaming)
        if want <= now or time.monotonic() > deadline:
            return want & now
        await asyncio.sleep(0.1)


async def run_real(core: Core, model: ModelProcess, api: httpx.AsyncClient,
                   record: Callable[[Row], None], fault: str, phase: str,
                   strike: Callable[[], int], restore: Callable[[], None] | None = None,
                   when: str = "now") -> list[Any]:
    """The load to the gate, then the fault: ``when`` ``now`` — 0.3 s after the gate opens
    (the results on their way to the harness); ``streaming`` — once the model is answering
    the fault round mid-stream; ``held`` — the harness processes are stopped (SIGSTOP) before
    the gate opens, and the fault strikes once each Runtime has handed its results to them:
    the harness holds a result it has not recorded. Returns the per-harness verdicts."""
    load = RealLoad(core.base_url, API_KEY, uuid.uuid4().hex[:8], model, SESSIONS, phase,
                    burst_sessions=BURST_SESSIONS)
    load.turns_may_fail = True
    since = await topic_ends(core.settings)
    running = asyncio.create_task(load.run())
    await load.all_at_gate()
    if when == "held":
        assert signal_harnesses(core, signal.SIGSTOP) > 0
    load.gate.set()
    if when == "streaming":
        streaming = await until_streaming(model, load, 3 * PAUSE_S)
        mid = len(streaming)
        for harness in HARNESS:  # the fault meets each harness mid-response
            assert {load.key(r, load.fault_round) for r in load.round_runs
                    if r.harness == harness} & streaming, (harness, streaming)
    elif when == "held":
        mid = await until_handed_over(core, load.fault_calls)
    else:
        await asyncio.sleep(0.3)
        mid = -1
    burst = load.burst_now(BURST)
    if burst:
        await asyncio.sleep(BURST_LEAD_S)
    at, t_fault = time.time(), time.monotonic()
    hit = await asyncio.to_thread(strike)
    if restore is not None:
        await asyncio.sleep(DOWN_S)
        await asyncio.to_thread(restore)
    t_restored = time.monotonic()
    recovered = await real_probe(api, model)
    try:
        await asyncio.wait_for(running, 400)
    except TimeoutError:
        pytest.fail(f"load not done: {load.progress()}; {load.problems}")
    assert core.dead() == [], core.logs_tail()
    sys.stderr.write(f"\n[chaos] {fault}: struck {hit} process(es); fault-round replies "
                     f"streaming at the strike {mid}; fault calls {len(load.fault_calls)}; "
                     f"burst {burst}\n")
    assert hit > 0, "the fault hit nothing"
    answers = {s for _, s in load.statuses}
    out = []
    requests = model.requests()
    for harness, label in HARNESS.items():
        sub = copy.copy(load)
        sub.runs = [r for r in load.runs if r.harness == harness]
        v = await verify(api, core, sub, since, [at])
        calls = {i.call_id for r in sub.runs for i in r.inputs if i.call_id}
        v.double_applied += [f"{label}: call {c}: its result twice in one model request"
                             for c in applied_twice_by_the_model_log(requests, calls)]
        row = make_row(fault, v, t_restored - t_fault, recovered - t_restored,
                       Counter(s for t, s in load.statuses if t >= t_fault), OK,
                       harness=label)
        record(row)
        if v.problems and core.log_dir is not None:
            (core.log_dir / f"problems-{uuid.uuid4().hex[:6]}.txt").write_text(
                f"{fault} {label}\n" + "\n".join(v.problems) + "\n")
        out.append(v)
        assert v.problems == [], (label, v.problems)
        assert v.acked == v.sent, [i for i in sub.inputs if not i.acked]
        if BURST_SESSIONS and BURST:
            assert_power(f"{fault} ({label})", v)
    assert load.problems == [], load.problems
    assert answers <= OK, answers
    return out


@pytest.fixture
async def real_api(real_core: Core) -> Any:
    async with real_core.client(timeout=15) as c:
        yield c


async def test_kill_harness_mid_result(real_core: Core, real_model: ModelProcess,
                                       real_api: httpx.AsyncClient,
                                       record: Callable[[Row], None]) -> None:
    """The must-show: every harness process is stopped, the Sessions submit their results,
    each Runtime hands them over (the harness holds them unrecorded), then ``kill -9``. Each
    such call ends ``uncertain`` — or ``applied`` when the harness printed the result's receipt
    before it died — exactly once; never ``failed``, never lost, never applied twice."""
    vs = await run_real(real_core, real_model, real_api, record,
                        "kill -9 harness mid-function-result", "result",
                        lambda: kill_harnesses(real_core), when="held")
    for v in vs:  # each call decided once: applied or uncertain (checked against receipts)
        assert v.verdicts["applied"] + v.verdicts["uncertain"] == v.calls, v.verdicts
        assert v.verdicts["uncertain"] > 0, v.verdicts  # the fault did meet held results


async def test_kill_harness_mid_turn(real_core: Core, real_model: ModelProcess,
                                     real_api: httpx.AsyncClient,
                                     record: Callable[[Row], None]) -> None:
    """``kill -9`` of every harness process while the model is answering a message (the
    harness mid-Turn): the Turn fails as both sides say, and the next round runs."""
    await run_real(real_core, real_model, real_api, record, "kill -9 harness mid-Turn", "turn",
                   lambda: kill_harnesses(real_core), when="streaming")


async def test_kill_model_server_mid_response(
        real_core: Core, real_model: ModelProcess, real_api: httpx.AsyncClient,
        record: Callable[[Row], None]) -> None:
    """``kill -9`` of the model server while it streams its answers to the applied results;
    started again 3 s later on the same port (the cut replies are played again)."""
    await run_real(real_core, real_model, real_api, record,
                   "kill -9 model server mid-response", "result", real_model.kill,
                   real_model.start, when="streaming")


def kill_runtimes(core: Core) -> int:
    """``kill -9`` of the real Runtime processes (their process groups: the harness processes
    under them die with them)."""
    for n in RUNTIMES:
        core.kill(n)
    return len(RUNTIMES)


def restarted(core: Core) -> Counter[str]:
    """How often the dispatcher has seen each Runtime come back as a new process."""
    assert core.log_dir is not None
    return Counter(rid for line in (core.log_dir / "dispatcher.log").read_text(
        errors="replace").splitlines() if "registry.runtime_restarted" in line
        for rid in core.runtime_ids.values() if f'"runtime_id": "{rid}"' in line)


def restart_runtimes(core: Core, budget: float = 60.0) -> None:
    """Start the Runtimes again and wait until the dispatcher has their new registrations: a
    Session delivered to before that may go to the dead process, and its Turn then fails
    (docs/runtime-boundary.md, "Binding", restarted under the same id) — the probe's would."""
    before = restarted(core)
    for n in RUNTIMES:
        core.respawn(n)
    ids = [core.runtime_ids[n.removeprefix("runtime-")] for n in RUNTIMES]
    deadline = time.monotonic() + budget
    while any(restarted(core)[rid] <= before[rid] for rid in ids):
        assert time.monotonic() < deadline, "the restarted Runtimes did not register"
        time.sleep(0.2)


async def test_kill_runtime_process_mid_turn(real_core: Core, real_model: ModelProcess,
                                             real_api: httpx.AsyncClient,
                                             record: Callable[[Row], None]) -> None:
    """``kill -9`` of the Runtime processes themselves while the model answers a message, and
    the same Runtimes started again 3 s later under their ids: the Turns they ran fail
    (``Binder.restarts``), what the dead processes were sent is not run again by their
    successors (the deliveries name the process, ``incarnation``), and the next round runs on
    the restarted Runtimes."""
    await run_real(real_core, real_model, real_api, record,
                   "kill -9 Runtime process mid-Turn", "turn",
                   lambda: kill_runtimes(real_core), lambda: restart_runtimes(real_core),
                   when="streaming")

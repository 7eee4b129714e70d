"""Chaos on the real harnesses: the load for Sessions on real ``codex app-server`` and real
``claude`` Runtimes, the scripted model server as a process of its own (so a fault can
``kill -9`` it mid-response), and what the model server's request log says about results
applied twice.

``RealLoad`` runs, per Session, ``ROUNDS`` rounds of: a message (round 0 creates the Session)
whose script makes the model call ``get_weather`` with a city unique to the round, the
function result for that call, the model's answer. Each round's message carries a longer key
than the last (``<base> q<k>`` and ``k`` dots), so the model server plays the newest round's
script (the longest key found in the request wins; the history holds the older keys). At round
``fault_round`` every Session waits at a gate (before its message for a fault mid-Turn, before
its result for a fault mid-result) until the scenario opens it and strikes; that round's model
replies pause (``wait``) so the harness is busy, not idle, when the fault hits.

Power: ``burst_sessions`` more Sessions (harnesses alternating) run no rounds. Each is created
with a message of its own key, waits at the gate, and just before the strike takes ``burst``
messages at once (``RealLoad.burst_now``). The first starts a Turn whose model reply pauses
``PAUSE_S``; the others are steers of it or wait behind it. All of them are in flight at the
strike. They go to Sessions of their own: a burst message handed over again after the fault
(a steer refused once its Turn ended comes back as a new Turn) then only starts one more Turn
of a burst Session, whose later model requests get the server's default reply. It never lands in
a round's Turn, where the model would be asked past the round's script."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from deploy.local.stack import free_port
from tests.support.chaosload import (
    Input,
    Load,
    SessionRun,
    create_retrying,
    read_items,
    turns_open,
)

Json = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
FUNCTION = "get_weather"  # the real Runtimes' default public function
ROUNDS = 3
PAUSE_S = 8.0  # the fault round's model pause: the harness is mid-Turn when the fault hits


class ModelProcess:
    """``python -m scripted_model --port P --log FILE`` in a process group of its own.
    ``kill`` is a real ``kill -9``; ``start`` again serves on the same port with the scripts
    registered so far, each from the reply it had reached (its requests in the log): a reply
    the kill cut off mid-stream is played again, since the harness retries that request."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        self.log_dir = log_dir
        self.log = log_dir / "model-requests.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None
        self.scripts: dict[str, list[list[Json]]] = {}
        self.cut: set[str] = set()  # scripts whose last reply a kill cut off

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        out = open(self.log_dir / "modelserver.log", "ab")  # the child writes to it
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scripted_model", "--port", str(self.port),
             "--log", str(self.log)], cwd=REPO, stdout=out, stderr=out,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/_requests?key=-", timeout=2).status_code == 200:
                    break
            assert self.proc.poll() is None, "the model server exited"
            assert time.monotonic() < deadline, "the model server did not start"
            time.sleep(0.1)
        played = Counter(r["script_key"] for r in self.requests() if r.get("script_key"))
        for key, replies in list(self.scripts.items()):  # a Session may register meanwhile
            n = played[key]
            # a reply cut off mid-stream is played again: the harness retries its request
            left = replies[n - 1:] if n and key in self.cut else replies[n:]
            if left:
                self._post(key, left)

    def kill(self) -> int:
        """``kill -9``; the scripts whose reply was streaming then are marked cut. Returns how
        many replies it cut."""
        assert self.proc is not None
        open_now = self.streaming()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None
        self.cut |= open_now
        return len(open_now)

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
            self.proc = None

    def register(self, key: str, replies: list[list[Json]]) -> None:
        self.scripts[key] = replies
        self._post(key, replies)

    def _post(self, key: str, replies: list[list[Json]]) -> None:
        """Register ``key`` — retried while the server is down (a fault killed it; ``start``
        then registers it too)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.post(f"{self.url}/_scripts", json={"key": key, "replies": replies},
                               timeout=10)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the model server stayed away"
                time.sleep(0.3)
        assert r.status_code == 200, r.text

    def requests(self) -> list[Json]:
        """Every request the model server recorded, across its restarts (the log file)."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def streaming(self, now: float | None = None) -> set[str]:
        """Scripts whose newest request got a pausing reply (the fault round's) less than
        ``PAUSE_S`` + 1 s ago: its answer is still streaming."""
        now = time.time() if now is None else now
        last: dict[str, Json] = {}
        played: Counter[str] = Counter()
        for r in self.requests():  # read once: the log holds every burst's history (MBs)
            if r.get("script_key"):
                last[r["script_key"]] = r
                played[r["script_key"]] += 1
        out = set()
        for key, r in last.items():
            replies = self.scripts.get(key, [])
            n = played[key]
            reply = replies[n - 1] if 0 < n <= len(replies) else []
            if any("wait" in s for s in reply) and now - float(r["at"]) < PAUSE_S + 1:
                out.add(key)
        return out


def results_per_request(requests: list[Json]) -> list[Counter[str]]:
    """For each request the model got: how many times each call's result is in it (Codex:
    ``function_call_output`` input items; Claude Code: ``tool_result`` blocks). A result the
    harness applied twice shows as a count of 2 in the history it sends."""
    out = []
    for r in requests:
        body = r.get("body") or {}
        seen: Counter[str] = Counter()
        for it in body.get("input") or [] if isinstance(body.get("input"), list) else []:
            if isinstance(it, dict) and it.get("type") == "function_call_output":
                seen[str(it.get("call_id"))] += 1
        for m in body.get("messages") or []:
            content = m.get("content") if isinstance(m, dict) else None
            for b in content if isinstance(content, list) else []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    seen[str(b.get("tool_use_id"))] += 1
        out.append(seen)
    return out


def applied_twice_by_the_model_log(requests: list[Json], call_ids: set[str]) -> list[str]:
    """The calls whose result appears more than once in one request's history."""
    return sorted({cid for seen in results_per_request(requests) for cid, n in seen.items()
                   if n > 1 and cid in call_ids})


class RealLoad(Load):
    """The load on real harnesses (see the module's docstring). ``phase``: ``turn`` (the gate
    before the fault round's message) or ``result`` (before its function result)."""

    def __init__(self, base_url: str, api_key: str, tag: str, model: ModelProcess,
                 sessions: int, phase: str, fault_round: int = 1,
                 burst_sessions: int = 0) -> None:
        super().__init__(base_url, api_key, tag, sessions=sessions + burst_sessions,
                         pace_s=0.0)
        self.rounds = sessions  # Sessions [0, rounds) run the rounds, the others take a burst
        self.model = model
        self.phase = phase
        self.fault_round = fault_round
        self.at_gate = 0
        self.gate = asyncio.Event()
        self.fault_calls: set[str] = set()  # calls whose result was in flight at the fault

    def text(self, run: SessionRun, step: Any) -> str:  # unused: rounds make their own
        raise NotImplementedError

    @property
    def round_runs(self) -> list[SessionRun]:
        return self.runs[:self.rounds]

    @property
    def burst_runs(self) -> list[SessionRun]:
        return self.runs[self.rounds:]

    def burst_key(self, run: SessionRun) -> str:
        return f"chaos {self.tag} s{run.index} burst"

    def burst_now(self, per_session: int) -> int:
        """``per_session`` messages at once to each burst Session (see the module's
        docstring); ``run`` waits for their answers. Returns how many were started."""
        n = 0
        for run in self.burst_runs:
            if run.session_id is None:
                continue
            for k in range(per_session):
                self.send_concurrent(run, f"{self.burst_key(run)} m{k}")
                n += 1
        return n

    async def _burst_session(self, http: httpx.AsyncClient, run: SessionRun) -> None:
        """Create the Session (its first Turn answered at once), let that Turn end, wait at
        the gate. The burst's Turn then gets the pausing reply, every later request the
        default one."""
        key = self.burst_key(run)
        await asyncio.to_thread(self.model.register, key, [
            [{"text": "ready"}], [{"text": "looking"}, {"wait": PAUSE_S}, {"text": "seen"}]])
        if not await self._create(http, run, key):
            return
        deadline = time.monotonic() + 150
        while True:  # its first Turn has started and ended: the burst starts a Turn of its own
            items = await self._poll(http, run) or []
            if any(it.get("type") == "turn" for it in items) and not turns_open(items):
                break
            if time.monotonic() > deadline:
                self.problems.append(f"s{run.index}: the first Turn did not end")
                return
            await asyncio.sleep(0.3)
        await self.wait_gate()

    async def _create(self, http: httpx.AsyncClient, run: SessionRun, text: str) -> bool:
        """Create ``run``'s Session with the message ``text``; False (a problem noted) when
        the create is not acked."""
        content = [{"type": "input_text", "text": text}]
        inp = Input(run.index, "create", text, str(uuid.uuid4()), content=content)
        run.inputs.append(inp)
        body = await self._send(http, inp, "/v1/sessions", {
            "harness": run.harness, "placement": "none",
            "input": [{"role": "user", "content": content}], "client_request_id": inp.idem})
        if body is None:
            self.problems.append(f"s{run.index}: create not acked")
            return False
        run.session_id = body["id"]
        return True

    def key(self, run: SessionRun, k: int) -> str:
        return f"chaos {self.tag} s{run.index} q{k}" + "." * k

    def city(self, run: SessionRun, k: int) -> str:
        return f"{self.tag}-s{run.index}-c{k}"

    def replies(self, run: SessionRun, k: int) -> list[list[Json]]:
        call = {"tool_call": {"name": FUNCTION, "arguments": {"city": self.city(run, k)}}}
        done = {"text": f"done {self.city(run, k)}"}
        if k != self.fault_round:
            return [[call], [done]]
        if self.phase == "turn":  # the model is still answering the message at the fault
            return [[{"text": "looking"}, {"wait": PAUSE_S}, call], [done]]
        # the result applied, the model is still answering it at the fault
        return [[call], [{"text": "reading"}, {"wait": PAUSE_S}, done]]

    async def wait_gate(self) -> None:
        self.at_gate += 1
        await self.gate.wait()

    async def all_at_gate(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while self.at_gate < len([r for r in self.runs if not self._gave_up(r)]):
            assert time.monotonic() < deadline, f"not all Sessions at the gate: {self.progress()}"
            await asyncio.sleep(0.2)

    def _gave_up(self, run: SessionRun) -> bool:
        return any(p.startswith(f"s{run.index}:") for p in self.problems)

    async def _session(self, http: httpx.AsyncClient, run: SessionRun) -> None:
        await asyncio.sleep(run.index * self.stagger_s)
        if run.index >= self.rounds:
            await self._burst_session(http, run)
            return
        for k in range(ROUNDS):
            text = self.key(run, k)
            await asyncio.to_thread(self.model.register, text, self.replies(run, k))
            content = [{"type": "input_text", "text": text}]
            msg = [{"role": "user", "content": content}]
            if k == self.fault_round and self.phase == "turn":
                await self.wait_gate()
            starts = sum(1 for it in run.seen if it.get("type") == "turn"
                         and it.get("state") == "started")
            if k == 0:
                if not await self._create(http, run, text):
                    return
            else:
                inp = Input(run.index, "message", text, str(uuid.uuid4()), content=content)
                run.inputs.append(inp)
                if await self._send(http, inp, f"/v1/sessions/{run.session_id}/events", {
                        "type": "agent.session.input.message", "input": msg,
                        "client_event_id": inp.idem}) is None:
                    self.problems.append(f"s{run.index}: {text} not acked")
                    return
            call = await self._call_or_end(http, run, self.city(run, k), starts)
            if call is None:  # the Turn ended without the call (the fault hit it first)
                if not (k == self.fault_round and self.phase == "turn"):
                    self.problems.append(f"s{run.index}: round {k}: no call, Turn over")
                    return
                continue
            if k == self.fault_round and self.phase != "turn":
                self.fault_calls.add(call["call_id"])
                await self.wait_gate()
            said = f"weather in {self.city(run, k)}: sunny"
            res = Input(run.index, "result", FUNCTION, str(uuid.uuid4()),
                        call_id=call["call_id"], output=said)
            run.inputs.append(res)
            if await self._send(http, res, f"/v1/sessions/{run.session_id}/events", {
                    "type": "agent.session.input.tool_result", "call_id": res.call_id,
                    "success": True, "output": said, "client_event_id": res.idem}) is None:
                self.problems.append(f"s{run.index}: result of round {k} not acked")
                return
            left = await self._wait_turns_over(http, run)
            if left:
                self.problems.append(f"s{run.index}: Turns {sorted(left)} never ended")
                return

    async def _call_or_end(self, http: httpx.AsyncClient, run: SessionRun, city: str,
                           starts: int, timeout: float = 150.0) -> Json | None:
        """The ``function_call`` Item for ``city``; None when a Turn started after the message
        (more than ``starts`` Turns) and every Turn has ended without the call."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            items = await self._poll(http, run) or []
            for it in items:
                if (it.get("type") == "function_call"
                        and (it.get("arguments") or {}).get("city") == city):
                    return it
            started = sum(1 for it in items if it.get("type") == "turn"
                          and it.get("state") == "started")
            if started > starts and not turns_open(items):
                return None
            await asyncio.sleep(0.3)
        self.problems.append(f"s{run.index}: call {city} never came")
        return None


async def real_probe(api: httpx.AsyncClient, model: ModelProcess, budget: float = 180.0
                     ) -> float:
    """``chaos.probe`` on the real harnesses: a Codex Session whose scripted model calls the
    function, its result, and the call's ``applied`` verdict — every service, the Runtime, the
    harness and the model server working. Returns when done; fails after ``budget`` s."""
    t0 = time.monotonic()
    key = f"PROBE-{uuid.uuid4().hex}"
    await asyncio.to_thread(model.register, key, [
        [{"tool_call": {"name": FUNCTION, "arguments": {"city": key}}}], [{"text": "ok"}]])
    body = {"harness": "codex", "placement": "none", "client_request_id": key, "input": key}
    sid = await create_retrying(api, body, t0, budget)
    sent = False
    while True:
        assert time.monotonic() - t0 < budget, f"probe {sid}: not done in {budget} s"
        items = await read_items(api, sid) or []
        for it in items:
            if it["type"] == "function_call_application":
                assert it["state"] == "applied", it
                return time.monotonic()
        call = next((it for it in items if it["type"] == "function_call"), None)
        if call is not None and not sent:
            with contextlib.suppress(httpx.TransportError):
                r = await api.post(f"/v1/sessions/{sid}/events", json={
                    "type": "agent.session.input.tool_result", "call_id": call["call_id"],
                    "success": True, "output": "probe", "client_event_id": f"p-{key}"})
                sent = r.status_code == 202
        await asyncio.sleep(0.3)

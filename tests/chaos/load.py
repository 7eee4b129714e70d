"""The chaos load generator and the checker.

``Load`` drives several Sessions (codex and claude_code, alternating) through the public HTTP API
like a real client: every input carries a client-minted idempotency id (``client_request_id`` /
``client_event_id``) and is retried with the SAME id after a 5xx, a 429, a timeout or a connection
error, until it gets its 201/202 — so "lost" and "duplicated" are measurable. Each Session's
script mixes messages and function results: a message containing ``call f<k> {...}`` makes the
reference Runtime open a call; the generator waits for the ``function_call`` Item, then submits
the result.

``check`` then reads every Session from the store (``GET …/items``) and from ``session.items``
(the whole topic) and counts, per input the generator sent, how often it appears."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx

from shared.kafka import assigned_consumer
from shared.settings import Settings
from shared.topics import topics_for

Json = dict[str, Any]
OK = (200, 201, 202)
RETRY_BUDGET_S = 150.0  # per input: the client keeps retrying this long
REQUEST_TIMEOUT_S = 15.0  # per attempt: a hang counts as a timeout and is retried

# One Session's script: ("message", k, with_call) or ("result", k). Step 0 creates the Session.
SCRIPT: list[tuple[str, int, bool]] = [
    ("message", 0, True), ("result", 0, False), ("message", 1, False),
    ("message", 2, True), ("result", 2, False), ("message", 3, False), ("message", 4, False),
    ("message", 5, True), ("result", 5, False), ("message", 6, False),
]


@dataclass
class Input:
    session: int
    kind: str  # create | message | result
    key: str  # the message text, or the function name whose result this is
    idem: str  # client_request_id / client_event_id
    call_id: str | None = None
    attempts: list[str] = field(default_factory=list)  # status codes / error names, in order
    acked_at: float | None = None

    @property
    def acked(self) -> bool:
        return self.acked_at is not None

    @property
    def retried(self) -> bool:
        return len(self.attempts) > 1


@dataclass
class SessionRun:
    index: int
    harness: str
    session_id: str | None = None
    inputs: list[Input] = field(default_factory=list)


class Load:
    def __init__(self, base_url: str, api_key: str, tag: str, sessions: int = 6,
                 pace_s: float = 0.6, stagger_s: float = 0.8,
                 avoid_steer_race: bool = True) -> None:
        self.base_url = base_url
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.tag = tag
        self.pace_s = pace_s
        self.stagger_s = stagger_s  # Session i starts i × stagger_s after the first
        self.runs = [SessionRun(i, "codex" if i % 2 else "claude_code")
                     for i in range(sessions)]
        # True: a message that asks for a call waits until the Session's Turns are over, so
        # it starts a Turn of its own. False: it may be a steer racing the Runtime's idle end
        # of the Turn — refused by the Runtime and handed over again by Core (docs/chaos.md)
        self.avoid_steer_race = avoid_steer_race
        self.problems: list[str] = []  # answers a correct Core never gives (4xx to valid input)
        self.statuses: list[tuple[float, str]] = []  # (time, status) of every attempt

    def text(self, run: SessionRun, k: int, with_call: bool) -> str:
        t = f"chaos {self.tag} s{run.index} m{k}"
        return f"{t} call f{k} {{\"k\": {k}}}" if with_call else t

    @property
    def inputs(self) -> list[Input]:
        return [i for r in self.runs for i in r.inputs]

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.base_url, headers=self.headers,
                                     timeout=REQUEST_TIMEOUT_S) as http:
            await asyncio.gather(*(self._session(http, r) for r in self.runs))

    async def _session(self, http: httpx.AsyncClient, run: SessionRun) -> None:
        await asyncio.sleep(run.index * self.stagger_s)
        for step, (kind, k, with_call) in enumerate(SCRIPT):
            if step:
                await asyncio.sleep(self.pace_s)
            if kind == "message":
                text = self.text(run, k, with_call)
                msg = [{"role": "user", "content": [{"type": "input_text", "text": text}]}]
                if step == 0:
                    inp = Input(run.index, "create", text, str(uuid.uuid4()))
                    run.inputs.append(inp)
                    body = await self._send(http, inp, "/v1/sessions", {
                        "harness": run.harness, "placement": "none", "input": msg,
                        "client_request_id": inp.idem})
                    if body is None:
                        return
                    run.session_id = body["id"]
                    continue
                if with_call and self.avoid_steer_race:
                    assert run.session_id is not None
                    await self._wait_turns_over(http, run.session_id)
                inp = Input(run.index, "message", text, str(uuid.uuid4()))
            else:
                assert run.session_id is not None
                call = await self._wait_call(http, run.session_id, f"f{k}",
                                             self.text(run, k, True))
                if not isinstance(call, dict):  # the message was never run
                    self.problems.append(f"s{run.index}: call f{k} never appeared ({call})")
                    return
                inp = Input(run.index, "result", f"f{k}", str(uuid.uuid4()),
                            call_id=call["call_id"])
            run.inputs.append(inp)
            assert run.session_id is not None
            path = f"/v1/sessions/{run.session_id}/events"
            if kind == "message":
                payload: Json = {"type": "agent.session.input.message", "input": msg,
                                 "client_event_id": inp.idem}
            else:
                payload = {"type": "agent.session.input.tool_result", "call_id": inp.call_id,
                           "success": True, "output": f"result of f{k} for s{run.index}",
                           "client_event_id": inp.idem}
            if await self._send(http, inp, path, payload) is None:
                return

    async def _send(self, http: httpx.AsyncClient, inp: Input, path: str, body: Json
                    ) -> Json | None:
        """POST until a 2xx, with the same body (so the same idempotency id) every time."""
        deadline = time.monotonic() + RETRY_BUDGET_S
        while True:
            wait = 0.5
            try:
                r = await http.post(path, json=body)
                inp.attempts.append(str(r.status_code))
                self.statuses.append((time.monotonic(), str(r.status_code)))
                if r.status_code in OK:
                    inp.acked_at = time.monotonic()
                    result: Json = r.json()
                    return result
                if r.status_code < 500 and r.status_code != 429:
                    self.problems.append(f"{path}: {r.status_code} {r.text[:300]}")
                    return None
                wait = float(r.headers.get("retry-after", "0.5") or 0.5)
            except httpx.TransportError as exc:  # connection refused/reset, timeouts
                inp.attempts.append(type(exc).__name__)
                self.statuses.append((time.monotonic(), type(exc).__name__))
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(min(wait, 2.0))

    async def _wait_turns_over(self, http: httpx.AsyncClient, sid: str,
                               timeout: float = RETRY_BUDGET_S) -> None:
        """Until every Turn of the Session has a ``completed`` or ``failed`` Item."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            items = await read_items(http, sid)
            if items is not None:
                started = {it["turn_id"] for it in items
                           if it.get("type") == "turn" and it.get("state") == "started"}
                ended = {it["turn_id"] for it in items if it.get("type") == "turn"
                         and it.get("state") in ("completed", "failed")}
                if started <= ended:
                    return
            await asyncio.sleep(0.3)

    async def _wait_call(self, http: httpx.AsyncClient, sid: str, name: str, text: str,
                         timeout: float = RETRY_BUDGET_S) -> Json | str:
        """The ``function_call`` Item ``name``; ``"refused"`` when the Turn of the message that
        asks for it failed on a Runtime refusal (no call will come), or ``"timeout"``. A steer
        that reached the Runtime after its native Turn had ended is handed over again by Core
        (docs/runtime-boundary.md), so its call does come."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            items = await read_items(http, sid) or []
            turn = None
            for it in items:
                if it.get("type") == "function_call" and it.get("name") == name:
                    return it
                if it.get("type") == "message" and text in [
                        p.get("text") for p in it.get("content", [])]:
                    turn = it.get("turn_id")
            for it in items:
                if (it.get("type") == "turn" and it.get("turn_id") == turn
                        and it.get("state") == "failed"
                        and "refused" in str(it.get("reason"))):
                    return "refused"
            await asyncio.sleep(0.5)
        return "timeout"


async def handed_over(http: httpx.AsyncClient, load: Load) -> int:
    """Steers the Runtime refused because its Turn had ended, handed over again by Core: the
    ``turn`` Items that say so (``decide_steer_refused``)."""
    n = 0
    for run in load.runs:
        if run.session_id is None:
            continue
        for it in await read_items(http, run.session_id) or []:
            reason = str(it.get("reason"))
            if it.get("type") == "turn" and it.get("state") == "started" and (
                    "reached the runtime after that Turn ended" in reason):
                n += 1
    return n


async def read_items(http: httpx.AsyncClient, sid: str) -> list[Json] | None:
    """Every Item of a Session from the store through the API (None: not readable now)."""
    out: list[Json] = []
    after = 0
    while True:
        try:
            r = await http.get(f"/v1/sessions/{sid}/items",
                               params={"after": after, "limit": 1000})
        except httpx.TransportError:
            return None
        if r.status_code != 200:
            return None
        page = r.json()
        out.extend(page["items"])
        if not page["has_more"]:
            return out
        after = page["next_after"]


async def read_topic(settings: Settings) -> dict[str, list[Json]]:
    """The whole ``session.items`` topic up to its current end, by session_id, in log order."""
    topic = topics_for(settings).session_items
    c = await assigned_consumer(settings, topic, at_end=False)
    try:
        tps = list(c.assignment())
        end = await c.end_offsets(tps)
        out: dict[str, list[Json]] = defaultdict(list)
        left = {tp for tp in tps if end[tp] > 0}
        while left:
            batch = await c.getmany(*left, timeout_ms=1000)
            for recs in batch.values():
                for r in recs:
                    item = json.loads(r.value)
                    out[item["session_id"]].append(item)
            for tp in list(left):
                if await c.position(tp) >= end[tp]:
                    left.discard(tp)
        return out
    finally:
        # aiokafka's group-less coordinator may re-raise its own task's cancellation on stop
        with contextlib.suppress(asyncio.CancelledError):
            await c.stop()


@dataclass
class Verdict:
    sent: int
    acked: int
    retried: int
    lost: list[str]
    duplicated: list[str]
    gaps: list[str]  # sequence, order and store/topic agreement violations


def _occurrences(items: list[Json], inp: Input) -> list[int]:
    """The sequences at which ``inp`` appears among ``items`` (distinct Items)."""
    seqs = []
    for it in items:
        if inp.kind in ("create", "message") and it.get("type") == "message":
            texts = [p.get("text") for p in it.get("content", [])]
            if inp.key in texts:
                seqs.append(it["sequence"])
        elif inp.kind == "result" and it.get("type") == "function_call_output":
            if it.get("call_id") == inp.call_id:
                seqs.append(it["sequence"])
    return seqs


def check(load: Load, store: dict[str, list[Json]], topic: dict[str, list[Json]]) -> Verdict:
    inputs = load.inputs
    lost: list[str] = []
    dup: list[str] = []
    gaps: list[str] = []
    # an input may only be in its own Session; a retried create that made a second Session
    # would show up as the same text in another Session of the topic
    everywhere: dict[str, int] = defaultdict(int)
    for items in topic.values():
        distinct = {it["id"]: it for it in items}.values()
        for it in distinct:
            if it.get("type") == "message":
                for p in it.get("content", []):
                    if isinstance(p.get("text"), str) and p["text"].startswith(
                            f"chaos {load.tag} "):
                        everywhere[p["text"]] += 1
    for run in load.runs:
        sid = run.session_id
        if sid is None:
            lost += [f"s{run.index}: never created"]
            continue
        items = store.get(sid, [])
        seqs = [it["sequence"] for it in items]
        if seqs != list(range(1, len(seqs) + 1)):
            gaps.append(f"{sid}: store sequences {seqs}")
        # the topic: Items may be published again after a crash (same id); distinct ids must
        # be exactly the store's, one id per sequence, first seen in sequence order
        first: dict[str, Json] = {}
        for it in topic.get(sid, []):
            prev = first.setdefault(it["id"], it)
            if prev["sequence"] != it["sequence"]:
                gaps.append(f"{sid}: Item {it['id']} published at sequences "
                            f"{prev['sequence']} and {it['sequence']}")
        topic_seqs = [it["sequence"] for it in first.values()]
        if topic_seqs != list(range(1, len(topic_seqs) + 1)):
            gaps.append(f"{sid}: topic sequences (first publication order) {topic_seqs}")
        # the topic was read first: the store may be ahead (a Turn ending meanwhile), never
        # behind, and the Items they share are the same
        by_seq_store = {it["sequence"]: it["id"] for it in items}
        by_seq_topic = {it["sequence"]: it["id"] for it in first.values()}
        if any(by_seq_store.get(q) != i for q, i in by_seq_topic.items()):
            gaps.append(f"{sid}: store and session.items disagree "
                        f"({len(by_seq_store)} vs {len(by_seq_topic)} Items)")
        last = 0
        for inp in run.inputs:
            if not (inp.acked or inp.retried):
                continue  # never answered and never retried: the client cannot know
            in_store = _occurrences(items, inp)
            in_topic = _occurrences(list(first.values()), inp)
            label = f"s{run.index}/{inp.kind}/{inp.key}"
            if not in_store or not in_topic:
                lost.append(f"{label} (store {in_store}, topic {in_topic})")
                continue
            if len(in_store) > 1 or len(in_topic) > 1 or (
                    inp.kind != "result" and everywhere[inp.key] > 1):
                dup.append(f"{label} (store {in_store}, topic {in_topic}, "
                           f"sessions {everywhere[inp.key]})")
            if in_store[0] <= last:
                gaps.append(f"{label}: at sequence {in_store[0]}, not after {last}")
            last = in_store[0]
    return Verdict(sent=len(inputs), acked=sum(i.acked for i in inputs),
                   retried=sum(i.retried for i in inputs), lost=lost, duplicated=dup,
                   gaps=gaps)


async def verify(api: httpx.AsyncClient, core: Any, load: Load) -> Verdict:
    """Let the Sessions settle (every Turn ended), read ``session.items`` and then the store
    (so the store can only be ahead), and check."""
    for run in load.runs:
        if run.session_id is not None:
            await load._wait_turns_over(api, run.session_id, timeout=60)
    topic = await read_topic(core.settings)
    store = {}
    for run in load.runs:
        if run.session_id is not None:
            items = await read_items(api, run.session_id)
            assert items is not None, run.session_id
            store[run.session_id] = items
    return check(load, store, topic)

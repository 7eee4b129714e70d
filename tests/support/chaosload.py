"""The chaos load generator and the checker.

``Load`` drives several Sessions (codex and claude_code, alternating) through the public HTTP API
like a real client: every input carries a client-minted idempotency id (``client_request_id`` /
``client_event_id``) and is retried with the SAME id after a 5xx, a 429, a timeout or a connection
error, until it gets its 201/202 — so "lost" and "duplicated" are measurable. Each Session's
script mixes messages and function results, with real PNG / JPEG images (data URIs) in messages
and in function results: a message containing ``call f<k> {...}`` makes the reference Runtime
open a call; the generator waits for the ``function_call`` Item, then submits the result.

``verify`` lets the Sessions settle (every Turn ended, every call decided — or it reports what
never did), then reads every Session from the store (``GET …/items``) and, from outside the
services, ``session.items``, ``runtime.deliveries`` and ``runtime.observations`` (from where
they stood when the load began), and ``check`` counts per input the generator sent how often it
was stored, published and delivered; per call its ``function_call_application`` verdicts; per
Turn its end."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import random
import time
import uuid
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiokafka import TopicPartition
from PIL import Image

from services.storage.domain.agent_output import AgentSaid, said_all
from shared.domain.receipts import REASON_LATE, REASON_TIMEOUT
from shared.kafka import assigned_consumer
from shared.settings import Settings
from shared.topics import topics_for
from tests.support import receipt_rules as rules

Json = dict[str, Any]
OK = (200, 201, 202)
RETRY_BUDGET_S = 150.0  # per input: the client keeps retrying this long
# per attempt: a hang counts as a timeout (no row allows one) and is retried. Above admission's
# own budget (storage's reply, 10 s), so a timeout here means no answer at all
REQUEST_TIMEOUT_S = 30.0
LATE_PREFIX = REASON_LATE.split("{")[0]  # "the native receipt arrived "
TIMEOUT_PREFIX = REASON_TIMEOUT.split("{")[0]  # "no matching native receipt within "
SETTLE_S = 90.0  # after the load: every Turn must end and every call get its verdict by then
QUIET_S = 5.0  # … and no new Item for this long (a late hand-over starts a new Turn)
REFUSAL_TURN_ENDED = "turn_ended"  # CONTRACT / docs/runtime-boundary.md: a steer after the end


@dataclass(frozen=True)
class Step:
    """One input of a Session's script. ``kind`` "message": ``key`` is the message's name
    (``m<k>``), ``calls`` the functions it asks the Runtime to call. ``kind`` "result": ``key``
    is the function whose result this is. ``images``: ``png`` / ``jpeg`` (a few hundred bytes,
    kept inline in the Item document) or ``png_large`` (about 270 KB as a data URI: above
    ``inline_image_max_bytes``, so storage keeps it in the image chunk store)."""
    kind: str
    key: str
    calls: tuple[str, ...] = ()
    images: tuple[str, ...] = ()


# One Session's script; step 0 creates the Session. 13 inputs, 5 calls (two of them opened by
# one message: two calls pending in one Turn), 9 images in 7 inputs.
SCRIPT: list[Step] = [
    Step("message", "m0", ("f0",), ("png",)),
    Step("result", "f0", images=("jpeg",)),
    Step("message", "m1", images=("png_large",)),
    Step("message", "m2", ("f2", "g2")),
    Step("result", "f2"),
    Step("result", "g2", images=("png",)),
    Step("message", "m3"),
    Step("message", "m4", images=("jpeg",)),
    Step("message", "m5", ("f5",), ("jpeg",)),
    Step("result", "f5", images=("png", "jpeg")),
    Step("message", "m6"),
    Step("message", "m7", ("f7",)),
    Step("result", "f7"),
]
CALLS_PER_SESSION = sum(len(s.calls) for s in SCRIPT)


def image_uri(kind: str, seed: str) -> str:
    """A real image, different for every ``seed``, as a data URI: PNG / JPEG of random pixels
    (Pillow-encoded, so admission's decoder accepts it)."""
    rnd = random.Random(zlib.crc32(f"{kind}:{seed}".encode()))
    side = {"png": 6, "jpeg": 8, "png_large": 260}[kind]
    img = Image.frombytes("RGB", (side, side), rnd.randbytes(side * side * 3))
    buf = io.BytesIO()
    fmt, mime = ("JPEG", "image/jpeg") if kind == "jpeg" else ("PNG", "image/png")
    img.save(buf, fmt)
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode()}"


def image_part(kind: str, seed: str) -> Json:
    return {"type": "input_image", "image_url": image_uri(kind, seed)}


@dataclass
class Input:
    session: int
    kind: str  # create | message | result
    key: str  # the message text, or the function name whose result this is
    idem: str  # client_request_id / client_event_id
    call_id: str | None = None
    content: list[Json] | None = None  # a message: its content parts, as sent
    output: str | list[Json] | None = None  # a result: its output, as sent
    attempts: list[str] = field(default_factory=list)  # status codes / error names, in order
    acked_at: float | None = None
    sent_at: float | None = None  # wall clock (time.time()) of the first attempt
    # sent beside other inputs of its Session (a burst): no order among them to check
    concurrent: bool = False

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
    call_text: dict[str, str] = field(default_factory=dict)  # function → the asking message
    seen: list[Json] = field(default_factory=list)  # the Items read so far, in sequence order


class Load:
    def __init__(self, base_url: str, api_key: str, tag: str, sessions: int = 12,
                 pace_s: float = 0.6, stagger_s: float = 0.3,
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
        self.http: httpx.AsyncClient | None = None  # while ``run`` runs
        self.bursts: list[asyncio.Task[Json | None]] = []
        self.burst_rounds = 0
        # a fault on the harness itself (chaosreal): the calls whose result was in flight then
        # may end ``uncertain`` — only when the harness printed no receipt for it — or
        # ``failed`` — only when the Runtime also refused the result (the dead harness was no
        # longer waiting for it) — and a Turn may fail, when the harness says so too (or,
        # killed, printed no end)
        self.fault_calls: set[str] = set()
        self.turns_may_fail = False

    def text(self, run: SessionRun, step: Step) -> str:
        t = f"chaos {self.tag} s{run.index} {step.key}"
        return t + "".join(f" call {c} {{\"k\": \"{c}\"}}" for c in step.calls)

    def images(self, run: SessionRun, step: Step) -> list[Json]:
        return [image_part(kind, f"{self.tag}:{run.index}:{step.key}:{j}")
                for j, kind in enumerate(step.images)]

    def progress(self) -> str:
        """Where each Session's script stands (for a load that does not finish), and the
        answers of the last 30 s."""
        recent = Counter(s for t, s in self.statuses if t >= time.monotonic() - 30)
        return f"answers in the last 30 s {dict(recent)}; " + ", ".join(
            f"s{r.index}: {len(r.inputs)}/{len(SCRIPT)} sent, last "
            f"{r.inputs[-1].key if r.inputs else '-'} "
            f"{'acked' if r.inputs and r.inputs[-1].acked else 'not acked'}"
            for r in self.runs)

    @property
    def inputs(self) -> list[Input]:
        return [i for r in self.runs for i in r.inputs]

    async def run(self) -> None:
        # no pool limit: a burst has hundreds of requests open at once, like as many clients
        async with httpx.AsyncClient(base_url=self.base_url, headers=self.headers,
                                     timeout=REQUEST_TIMEOUT_S,
                                     limits=httpx.Limits(max_connections=None,
                                                         max_keepalive_connections=64)
                                     ) as http:
            self.http = http
            try:
                await asyncio.gather(*(self._session(http, r) for r in self.runs))
                # the bursts' inputs too get their 201/202 (or their retry budget ends)
                while any(not t.done() for t in self.bursts):
                    await asyncio.gather(*self.bursts)
            finally:
                self.http = None

    async def all_created(self, timeout: float = 120.0) -> None:
        """Until every Session of the load exists (its create acked)."""
        deadline = time.monotonic() + timeout
        while any(r.session_id is None for r in self.runs):
            assert time.monotonic() < deadline, f"Sessions not created: {self.progress()}"
            await asyncio.sleep(0.1)

    def burst(self, total: int) -> int:
        """Send ``total`` messages at once, spread over the Sessions (``b<round>.<k>``, text
        only, no call): hundreds of inputs in flight at the moment of a fault, each retried
        with its id like every input. Returns how many were started; ``run`` waits for them."""
        assert self.http is not None, "burst while the load runs"
        runs = [r for r in self.runs if r.session_id is not None]
        self.burst_rounds += 1
        for k in range(total):
            run = runs[k % len(runs)]
            self.send_concurrent(run, f"chaos {self.tag} s{run.index} b{self.burst_rounds}.{k}")
        return total

    def send_concurrent(self, run: SessionRun, text: str) -> None:
        """Send ``text`` to ``run``'s Session as a message beside others (a burst's): a task
        that ``run`` waits for."""
        assert self.http is not None, "a burst while the load runs"
        content = [{"type": "input_text", "text": text}]
        inp = Input(run.index, "message", text, str(uuid.uuid4()), content=content,
                    concurrent=True)
        run.inputs.append(inp)
        payload = {"type": "agent.session.input.message",
                   "input": [{"role": "user", "content": content}],
                   "client_event_id": inp.idem}
        self.bursts.append(asyncio.create_task(
            self._send(self.http, inp, f"/v1/sessions/{run.session_id}/events", payload)))

    async def _session(self, http: httpx.AsyncClient, run: SessionRun) -> None:
        await asyncio.sleep(run.index * self.stagger_s)
        for n, step in enumerate(SCRIPT):
            if n:
                await asyncio.sleep(self.pace_s)
            payload: Json
            if step.kind == "message":
                text = self.text(run, step)
                for c in step.calls:
                    run.call_text[c] = text
                content = [{"type": "input_text", "text": text}, *self.images(run, step)]
                msg = [{"role": "user", "content": content}]
                if n == 0:
                    inp = Input(run.index, "create", text, str(uuid.uuid4()), content=content)
                    run.inputs.append(inp)
                    body = await self._send(http, inp, "/v1/sessions", {
                        "harness": run.harness, "placement": "none", "input": msg,
                        "client_request_id": inp.idem})
                    if body is None:
                        return
                    run.session_id = body["id"]
                    continue
                assert run.session_id is not None
                if step.calls and self.avoid_steer_race:
                    open_turns = await self._wait_turns_over(http, run)
                    if open_turns:
                        self.problems.append(f"s{run.index} {run.session_id}: Turns "
                                             f"{sorted(open_turns)} never ended")
                        return
                inp = Input(run.index, "message", text, str(uuid.uuid4()), content=content)
                payload = {"type": "agent.session.input.message", "input": msg,
                           "client_event_id": inp.idem}
            else:
                assert run.session_id is not None
                call = await self._wait_call(http, run, step.key, run.call_text[step.key])
                if not isinstance(call, dict):  # the message was never run
                    self.problems.append(f"s{run.index}: call {step.key} never appeared ({call})")
                    return
                said = f"result of {step.key} for s{run.index}"
                output: str | list[Json] = (
                    [{"type": "input_text", "text": said}, *self.images(run, step)]
                    if step.images else said)
                inp = Input(run.index, "result", step.key, str(uuid.uuid4()),
                            call_id=call["call_id"], output=output)
                payload = {"type": "agent.session.input.tool_result", "call_id": inp.call_id,
                           "success": True, "output": output, "client_event_id": inp.idem}
            run.inputs.append(inp)
            path = f"/v1/sessions/{run.session_id}/events"
            if await self._send(http, inp, path, payload) is None:
                return

    async def _send(self, http: httpx.AsyncClient, inp: Input, path: str, body: Json
                    ) -> Json | None:
        """POST until a 2xx, with the same body (so the same idempotency id) every time."""
        deadline = time.monotonic() + RETRY_BUDGET_S
        if inp.sent_at is None:
            inp.sent_at = time.time()
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

    async def _poll(self, http: httpx.AsyncClient, run: SessionRun) -> list[Json] | None:
        """The Session's Items, reading only those after the last one seen (``after``): the
        generator polls often, and a full read of every Session (a 270 KB image among its
        Items) each time would cost more CPU than the load itself. None: not readable now."""
        assert run.session_id is not None
        after = run.seen[-1]["sequence"] if run.seen else 0
        new = await read_items(http, run.session_id, after)
        if new is None:
            return None
        run.seen.extend(new)
        return run.seen

    async def _wait_turns_over(self, http: httpx.AsyncClient, run: SessionRun,
                               timeout: float = RETRY_BUDGET_S) -> set[str]:
        """Until every Turn of the Session has a ``completed`` or ``failed`` Item. Returns the
        Turns still open at the timeout (empty: all ended) — never a silent timeout."""
        deadline = time.monotonic() + timeout
        open_turns: set[str] = {"(the Session's Items could not be read)"}
        while time.monotonic() < deadline:
            items = await self._poll(http, run)
            if items is not None:
                open_turns = turns_open(items)
                if not open_turns:
                    return open_turns
            await asyncio.sleep(0.4)
        return open_turns

    async def _wait_call(self, http: httpx.AsyncClient, run: SessionRun, name: str, text: str,
                         timeout: float = RETRY_BUDGET_S) -> Json | str:
        """The ``function_call`` Item ``name``; ``"refused"`` when the Turn of the message that
        asks for it failed on a Runtime refusal (no call will come), or ``"timeout"``. A steer
        that reached the Runtime after its native Turn had ended is handed over again by Core
        (docs/runtime-boundary.md), so its call does come."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            items = await self._poll(http, run) or []
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
            await asyncio.sleep(0.4)
        return "timeout"


def turns_open(items: list[Json]) -> set[str]:
    """Turns with a ``started`` Item and no ``completed`` / ``failed`` one."""
    started = {it["turn_id"] for it in items
               if it.get("type") == "turn" and it.get("state") == "started"}
    ended = {it["turn_id"] for it in items
             if it.get("type") == "turn" and it.get("state") in ("completed", "failed")}
    return started - ended


def calls_undecided(items: list[Json]) -> set[str]:
    """Calls with a ``function_call`` Item and no ``function_call_application`` verdict."""
    calls = {it["call_id"] for it in items if it.get("type") == "function_call"}
    decided = {it["call_id"] for it in items if it.get("type") == "function_call_application"}
    return calls - decided


async def create_retrying(api: httpx.AsyncClient, body: dict[str, Any], t0: float,
                          budget: float) -> str:
    """``POST /v1/sessions`` with ``body`` until 201, retrying like a client (every 0.5 s, on a
    5xx, a 429 or a broken connection); the new Session's id. Fails ``budget`` seconds after
    ``t0``, naming what the attempts got (the probes' first step)."""
    answers: Counter[str] = Counter()
    last = ""
    while True:
        try:
            r = await api.post("/v1/sessions", json=body)
        except httpx.TransportError as exc:
            answers[type(exc).__name__] += 1
        else:
            answers[str(r.status_code)] += 1
            if r.status_code == 201:
                return str(r.json()["id"])
            last = r.text[:300]
            assert r.status_code >= 500 or r.status_code == 429, r.text
        assert time.monotonic() - t0 < budget, (
            f"probe: no Session in {budget:.0f} s; answers {dict(answers)}, the last {last}")
        await asyncio.sleep(0.5)


async def read_items(http: httpx.AsyncClient, sid: str, after: int = 0) -> list[Json] | None:
    """Every Item of a Session (after sequence ``after``) from the store through the API (None:
    not readable now)."""
    out: list[Json] = []
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


# The key ``read_topic`` adds to each record: its Kafka timestamp (the producer's wall clock, s)
TS = "_kafka_ts"
# The topics read from outside, by their name in ``Topics``.
WATCHED = ("session_items", "runtime_deliveries", "runtime_observations")
Offsets = dict[str, dict[int, int]]  # topic → partition → offset


async def topic_ends(settings: Settings) -> Offsets:
    """Where each watched topic ends now: the checker reads from here (the load's Sessions are
    created after this, so nothing of theirs is before it)."""
    out: Offsets = {}
    for attr in WATCHED:
        topic = getattr(topics_for(settings), attr)
        c = await assigned_consumer(settings, topic, at_end=False)
        try:
            ends = await c.end_offsets(list(c.assignment()))
            out[topic] = {tp.partition: off for tp, off in ends.items()}
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await c.stop()
    return out


async def read_topic(settings: Settings, topic: str, since: Offsets | None = None
                     ) -> dict[str, list[Json]]:
    """A topic from ``since`` (default: its beginning) up to its current end, by
    ``session_id``, in log order per partition."""
    c = await assigned_consumer(settings, topic, at_end=False)
    try:
        tps = list(c.assignment())
        start = (since or {}).get(topic, {})
        for tp in tps:
            if start.get(tp.partition):
                c.seek(tp, start[tp.partition])
        end = await c.end_offsets(tps)
        out: dict[str, list[Json]] = defaultdict(list)
        left = {tp for tp in tps if end[tp] > start.get(tp.partition, 0)}
        while left:
            batch = await c.getmany(*left, timeout_ms=1000)
            for recs in batch.values():
                for r in recs:
                    rec = json.loads(r.value)
                    if isinstance(rec, dict) and isinstance(rec.get("session_id"), str):
                        rec[TS] = r.timestamp / 1000  # the producer's wall clock
                        out[rec["session_id"]].append(rec)
            for tp in list(left):
                if await c.position(TopicPartition(tp.topic, tp.partition)) >= end[tp]:
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
    # what the dispatcher and the receipt tracker produced, seen from outside
    delivered: int = 0  # acked inputs with a delivery record carrying them
    undelivered: list[str] = field(default_factory=list)
    delivery_problems: list[str] = field(default_factory=list)  # twice, altered, not handed over
    calls: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)  # application state → count
    verdict_problems: list[str] = field(default_factory=list)  # not exactly one, not applied
    # (session index, call id) of each call ``uncertain`` because its window ran out: its receipt
    # came after the window (receipts' REASON_LATE), or none came in it (REASON_TIMEOUT: the
    # tracker read the delivery overdue, or its timer fired first); ``excuse_late`` decides
    # whether a fault explains it
    late: dict[str, tuple[int, str]] = field(default_factory=dict)  # its problem → the call
    # of those, the calls whose native receipt is on runtime.observations (``receipt_counts``):
    # the harness did apply the result, only not within the window
    applied_late: set[tuple[int, str]] = field(default_factory=set)
    excused: list[str] = field(default_factory=list)  # late verdicts a broker outage explains
    turns: int = 0
    turns_ended: int = 0
    turn_problems: list[str] = field(default_factory=list)  # never ended, ended twice, failed
    agent_messages: int = 0  # agent messages the harnesses printed (runtime.observations)
    # printed but not an Item exactly once (missing, twice, altered)
    agent_problems: list[str] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)  # still open after SETTLE_S
    # fault calls ``uncertain`` or ``failed``: allowed only when the harness printed no
    # receipt for them (and, ``failed``, the Runtime refused the result: the harness was not
    # waiting for it any more)
    fault_undecided: dict[str, str] = field(default_factory=dict)
    # calls whose result the harness applied more than once (receipt_rules: 2+ receipts)
    double_applied: list[str] = field(default_factory=list)
    # Turns whose end Core and the harness do not agree on (``turn_disagreements``)
    turn_disagreements: list[str] = field(default_factory=list)
    # at each fault's moment: inputs in flight or being processed then (``in_flight_at``)
    in_flight: list[int] = field(default_factory=list)
    handovers: int = 0  # deliveries ``…_r<n>``: refused steers handed over again

    @property
    def problems(self) -> list[str]:
        return (self.lost + self.duplicated + self.gaps + self.undelivered
                + self.delivery_problems + self.verdict_problems + self.turn_problems
                + self.agent_problems + self.unsettled + self.double_applied
                + self.turn_disagreements)


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


def _altered(items: list[Json], inp: Input, seq: int) -> bool:
    """The Item at ``seq`` does not hold ``inp`` exactly as sent (text and images, in order)."""
    it = next(i for i in items if i["sequence"] == seq)
    if inp.kind == "result":
        return bool(it.get("output") != inp.output or it.get("success") is not True)
    return bool(it.get("content") != inp.content)


def _base(delivery_id: str) -> tuple[str, int]:
    """``dlv_x`` → (``dlv_x``, 0); a hand-over again ``dlv_x_r2`` → (``dlv_x``, 2)."""
    base, _, n = delivery_id.partition("_r")
    return base, int(n) if n.isdigit() else 0


def _check_deliveries(v: Verdict, run: SessionRun, deliveries: list[Json],
                      observations: list[Json],
                      fault_calls: frozenset[str] | set[str] = frozenset(),
                      turns_may_fail: bool = False) -> None:
    """Every acked input has a delivery record carrying it exactly as sent (a ``start`` or
    ``steer`` holding the message, or a ``function_result`` for its call with its output as
    content), all under one delivery (a republication after a crash repeats the same
    ``delivery_id``; a hand-over again is ``<id>_r<n>``); every steer the Runtime refused
    because its Turn had ended was handed over again; no other refusal."""
    by_message: dict[str, set[str]] = defaultdict(set)
    by_call: dict[str, list[Json]] = defaultdict(list)
    ids: set[str] = set()
    for d in deliveries:
        ids.add(d["delivery_id"])
        if d.get("kind") in ("start", "steer"):
            for m in d.get("messages", []):
                by_message[json.dumps(m.get("content"), sort_keys=True)].add(d["delivery_id"])
        elif d.get("kind") == "function_result":
            by_call[str(d.get("call_id"))].append(d)
    v.handovers += sum(1 for i in ids if _base(i)[1] > 0)
    for inp in run.inputs:
        if not (inp.acked or inp.retried):
            continue
        label = f"s{run.index}/{inp.kind}/{inp.key}"
        if inp.kind == "result":
            found = by_call.get(str(inp.call_id), [])
            want = ([{"type": "input_text", "text": inp.output}] if isinstance(inp.output, str)
                    else inp.output)
            if found and any(d.get("content") != want or d.get("success") is not True
                             for d in found):
                v.delivery_problems.append(f"{label}: delivered altered")
            got = {d["delivery_id"] for d in found}
        else:
            got = by_message.get(json.dumps(inp.content, sort_keys=True), set())
        if not got:
            v.undelivered.append(f"{label} (call {inp.call_id})" if inp.call_id else label)
            continue
        v.delivered += 1
        if len({_base(i)[0] for i in got}) > 1:
            v.delivery_problems.append(f"{label}: delivered as {sorted(got)} (twice)")
    for o in observations:
        refusal = o.get("refusal")
        if not isinstance(refusal, dict):
            continue
        did = str(refusal.get("delivery_id"))
        if refusal.get("kind") == "steer" and refusal.get("code") == REFUSAL_TURN_ENDED:
            base, n = _base(did)
            if not any(_base(i)[0] == base and _base(i)[1] > n for i in ids):
                v.delivery_problems.append(f"s{run.index}: steer {did} refused "
                                           "(turn ended) and never handed over again")
        elif refusal.get("call_id") in fault_calls and refusal.get("kind") == "function_result":
            continue  # a result for a call the killed harness can no longer take
        elif turns_may_fail and refusal.get("kind") in ("start", "steer"):
            continue  # the Turn's input, refused as its harness died (the Turn-state check)
        else:
            v.delivery_problems.append(f"s{run.index}: the Runtime refused {did}: "
                                       f"{refusal.get('reason')}")


def _check_verdicts_and_turns(v: Verdict, run: SessionRun, items: list[Json],
                              fault_calls: frozenset[str] | set[str] = frozenset(),
                              turns_may_fail: bool = False) -> None:
    """Exactly one ``function_call_application`` per call, ``applied`` (every result reaches a
    live Runtime that applies it; a restarted tracker still counts a receipt that came in the
    window, docs/receipts.md), none for a call that does not exist; every Turn started once and
    ended once (``completed``; a ``failed`` Turn is reported: nothing in this load should fail
    one)."""
    calls = [it["call_id"] for it in items if it.get("type") == "function_call"]
    v.calls += len(set(calls))
    if len(calls) != len(set(calls)):
        v.verdict_problems.append(f"s{run.index}: a call opened twice {calls}")
    apps: dict[str, list[Json]] = defaultdict(list)
    for it in items:
        if it.get("type") == "function_call_application":
            apps[it["call_id"]].append(it)
            v.verdicts[it.get("state")] += 1
    for cid in set(calls) | set(apps):
        got = apps.get(cid, [])
        if cid not in calls:
            v.verdict_problems.append(f"s{run.index}: verdict for unknown call {cid}")
        elif len(got) != 1:
            v.verdict_problems.append(f"s{run.index}: call {cid} has {len(got)} verdicts "
                                      f"{[a.get('state') for a in got]}")
        elif got[0].get("state") in ("uncertain", "failed") and cid in fault_calls:
            # _check_receipts: only with no receipt printed (failed: and a Runtime refusal)
            v.fault_undecided[cid] = str(got[0].get("state"))
        elif got[0].get("state") != "applied":
            problem = f"s{run.index}: call {cid} {got[0].get('state')}: {got[0].get('reason')}"
            v.verdict_problems.append(problem)
            if got[0].get("state") == "uncertain" and str(got[0].get("reason")).startswith(
                    (LATE_PREFIX, TIMEOUT_PREFIX)):
                v.late[problem] = (run.index, cid)
    turns: dict[str, list[Json]] = defaultdict(list)
    for it in items:
        if it.get("type") == "turn":
            turns[it["turn_id"]].append(it)
    for tid, its in turns.items():
        states = [it.get("state") for it in its]
        ends = [it for it in its if it.get("state") in ("completed", "failed")]
        if states.count("started") == 1:
            v.turns += 1
        if states[0] != "started" or states.count("started") != 1 or len(ends) != 1:
            v.turn_problems.append(f"s{run.index}: Turn {tid} {states}")
            continue
        v.turns_ended += 1
        if ends[0].get("state") == "failed" and not turns_may_fail:
            v.turn_problems.append(f"s{run.index}: Turn {tid} failed: {ends[0].get('reason')}")


def excuse_late(v: Verdict, load: Load, away_from: float, back_at: float, window_s: float
                ) -> None:
    """A broker outage longer than the receipt window can hold a ``function_result`` delivery
    (appended just before the broker died, fetched by the Runtime only once it is back) or its
    receipt past the window: the spec's verdict is then ``uncertain`` (not confirmed within 10
    s), not ``applied`` — with the late-receipt reason when the tracker read the receipt before
    deciding, with the timeout reason when it read the delivery already overdue (or its timer
    fired before the receipt came). Such a verdict is moved from ``verdict_problems`` to
    ``excused`` when — and only when — the harness did apply the result (its native receipt is
    on ``runtime.observations``: ``Verdict.applied_late``) and the result was acknowledged to the
    client within one window before the broker went away, or while it was away
    (``time.monotonic()`` of this process); an overdue verdict of any other call stays a
    problem, saying why."""
    acked = {(i.session, i.call_id): i.acked_at for i in load.inputs
             if i.kind == "result" and i.call_id}
    for problem, (session, call_id) in v.late.items():
        at = acked.get((session, call_id))
        v.verdict_problems.remove(problem)
        applied = (session, call_id) in v.applied_late
        if applied and at is not None and away_from - window_s <= at <= back_at:
            v.excused.append(problem)
            continue
        # say why, so a failure shows how far outside the outage it was
        when = "never acknowledged" if at is None else (
            f"result acknowledged {at - away_from:+.1f} s from the outage's start, "
            f"{at - back_at:+.1f} s from the broker's return")
        seen = "" if applied else "; no native receipt of it on runtime.observations"
        v.verdict_problems.append(f"{problem} ({when}{seen})")


def check(load: Load, store: dict[str, list[Json]], topic: dict[str, list[Json]],
          deliveries: dict[str, list[Json]] | None = None,
          observations: dict[str, list[Json]] | None = None) -> Verdict:
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
    v = Verdict(sent=len(inputs), acked=sum(i.acked for i in inputs),
                retried=sum(i.retried for i in inputs), lost=lost, duplicated=dup, gaps=gaps)
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
        # the Sessions have settled: the topic holds exactly the store's Items
        by_seq_store = {it["sequence"]: it["id"] for it in items}
        by_seq_topic = {it["sequence"]: it["id"] for it in first.values()}
        if by_seq_store != by_seq_topic:
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
            if _altered(items, inp, in_store[0]):
                gaps.append(f"{label}: stored altered (text or images not as sent)")
            if inp.concurrent:
                continue  # sent beside others: no order among them
            if in_store[0] <= last:
                gaps.append(f"{label}: at sequence {in_store[0]}, not after {last}")
            last = in_store[0]
        mine = (deliveries or {}).get(sid, []), (observations or {}).get(sid, [])
        if deliveries is not None:
            _check_deliveries(v, run, *mine, fault_calls=load.fault_calls,
                              turns_may_fail=load.turns_may_fail)
        _check_verdicts_and_turns(v, run, items, load.fault_calls, load.turns_may_fail)
        if deliveries is not None:  # after the verdicts: it reads ``v.late``
            _check_receipts(v, run, items, *mine)
        if observations is not None:
            _check_agent_messages(v, run, items, mine[1])
    return v


def printed_agent_messages(observations: list[Json]) -> dict[str, str]:
    """Every agent message the harness printed (by the same reading storage applies,
    ``services.storage.domain.agent_output``): its native identity → its text."""
    out: dict[str, str] = {}
    for o in observations:
        root = o.get("root_thread_id")
        for said in said_all(str(o.get("harness") or ""), o.get("native"),
                             root_thread_id=root if isinstance(root, str) else None,
                             fallback_id=o.get("observation_id")):
            if isinstance(said, AgentSaid):
                out.setdefault(said.key, said.text)
    return out


def _check_agent_messages(v: Verdict, run: SessionRun, items: list[Json],
                          observations: list[Json]) -> None:
    """Every agent message the harness printed is an agent Item exactly once, its text exactly
    as printed (the Sessions have settled: every Turn ended, so none is still held)."""
    printed = Counter(printed_agent_messages(observations).values())
    stored = Counter("".join(p.get("text", "") for p in it.get("content", []))
                     for it in items if it.get("type") == "message" and it.get("role") == "agent")
    v.agent_messages += sum(printed.values())
    for text in sorted(printed.keys() | stored.keys()):
        if printed[text] != stored[text]:
            v.agent_problems.append(f"s{run.index}: agent message {text!r:.60} printed "
                                    f"{printed[text]}×, {stored[text]} Item(s)")


def _check_receipts(v: Verdict, run: SessionRun, items: list[Json], deliveries: list[Json],
                    observations: list[Json]) -> None:
    """From the harness's own records (``runtime.observations``), judged by the seed's rules
    coded again here (``tests.support.receipt_rules``, not the tracker's matcher): how often
    each call's delivered result was applied. An ``applied`` verdict needs a receipt; two or
    more receipts of one call is a result applied twice (``double_applied``). Of the overdue
    calls, those with a receipt are ``applied_late`` (for ``excuse_late``). And every Turn's
    end as Core stored it must be the end the harness printed for it (the Runtime's word,
    ``synthesized``, for a harness that died): ``turn_disagreements``."""
    counts = receipt_counts(run.harness, items, deliveries, observations)
    for it in items:
        if it.get("type") != "function_call_application":
            continue
        cid = str(it["call_id"])
        if it.get("state") == "applied" and not counts.get(cid):
            v.verdict_problems.append(f"s{run.index}: call {cid} applied, but no native "
                                      "receipt of its result on runtime.observations")
    refused = {o["refusal"].get("call_id") for o in observations
               if isinstance(o.get("refusal"), dict)}
    for cid, state in sorted(v.fault_undecided.items()):
        if counts.get(cid):  # the harness printed it: the Runtime forwarded it, in the window
            v.verdict_problems.append(f"s{run.index}: call {cid} {state}, but the harness "
                                      "printed its receipt")
        elif state == "failed" and cid not in refused:
            v.verdict_problems.append(f"s{run.index}: call {cid} failed, but the Runtime "
                                      "never refused its result")
    for cid, n in counts.items():
        if n > 1:
            v.double_applied.append(f"s{run.index}: call {cid}: {n} native receipts")
    for index, cid in v.late.values():
        if index == run.index and counts.get(cid):
            v.applied_late.add((index, cid))
    v.turn_disagreements += turn_disagreements(run.harness, items, observations,
                                               f"s{run.index}")


def receipt_counts(harness: str, items: list[Json], deliveries: list[Json],
                   observations: list[Json]) -> dict[str, int]:
    """Per call of the Session (its ``function_call`` Items): how many of the harness's
    records (distinct observations) confirm the result delivered for it
    (``receipt_rules.confirms``, with the native ids the call was announced with)."""
    natives = [(o.get("observation_id"), o["native"]) for o in observations
               if isinstance(o.get("native"), dict)]
    ids = {str(it["call_id"]) for it in items if it.get("type") == "function_call"}
    calls = rules.announced(harness, [n for _, n in natives], ids)
    out: dict[str, int] = {}
    for it in items:
        if it.get("type") != "function_call":
            continue
        cid = str(it["call_id"])
        call = calls.get(cid)
        results = {json.dumps([d.get("success") is True, d.get("content") or []])
                   for d in deliveries
                   if d.get("kind") == "function_result" and d.get("call_id") == cid}
        found: set[str] = set()
        for raw in results if call is not None else ():
            success, content = json.loads(raw)
            assert call is not None
            found |= {str(oid) for oid, n in natives
                      if rules.confirms(call, success, content, n)}
        out[cid] = len(found)
    return out


def turn_disagreements(harness: str, items: list[Json], observations: list[Json],
                       label: str) -> list[str]:
    """Turns whose end Core stored (``completed`` / ``failed``) is not the one end the harness
    printed for that Turn (``receipt_rules.turn_end`` of the observations the Runtime tagged
    with the Core Turn's id), or that only one side ended — but a Turn Core failed and the
    harness printed no end for agrees: the harness was killed in it."""
    core: dict[str, str] = {}
    for it in items:
        if it.get("type") == "turn" and it.get("state") in ("completed", "failed"):
            core.setdefault(it["turn_id"], it["state"])
    native: dict[str, dict[str, str]] = defaultdict(dict)
    for o in observations:
        end = rules.turn_end(harness, o)
        if end is not None and isinstance(o.get("turn_id"), str):
            native[o["turn_id"]][str(o.get("observation_id"))] = end
    out = []
    for tid in sorted(core.keys() | native.keys()):
        ends = sorted(native.get(tid, {}).values())
        if ends == [] and core.get(tid) == "failed":
            continue  # a harness killed mid-Turn prints no end; Core failed the Turn
        if ends != [core.get(tid)]:
            out.append(f"{label}: Turn {tid}: Core {core.get(tid)}, the harness {ends}")
    return out


async def settle(api: httpx.AsyncClient, load: Load, timeout: float = SETTLE_S,
                 quiet_s: float = QUIET_S) -> list[str]:
    """Until every Session's Turns have ended and every call has its verdict (a verdict comes
    at the latest when the receipt window closes), and no Session got a new Item for
    ``quiet_s`` — a steer the Runtime refused after its Turn ended is handed over again as a
    new Turn, possibly after every Turn had ended. Returns what is still open at the timeout:
    a Turn that never ends or a call never decided fails the scenario, not a silent wait."""
    deadline = time.monotonic() + timeout
    last_change = time.monotonic()
    count = -1
    while True:
        still: list[str] = []
        total = 0
        for run in load.runs:
            if run.session_id is None:
                continue
            items = await load._poll(api, run)
            if items is None:
                still.append(f"s{run.index} {run.session_id}: Items not readable")
                continue
            total += len(items)
            still += [f"s{run.index} {run.session_id}: Turn {t} never ended"
                      for t in sorted(turns_open(items))]
            still += [f"s{run.index} {run.session_id}: call {c} never decided"
                      for c in sorted(calls_undecided(items))]
        if total != count:
            count, last_change = total, time.monotonic()
        if (not still and time.monotonic() - last_change >= quiet_s) or (
                time.monotonic() > deadline):
            return still
        await asyncio.sleep(1.0)


async def verify(api: httpx.AsyncClient, core: Any, load: Load, since: Offsets,
                 faults_at: list[float] | None = None) -> Verdict:
    """Let the Sessions settle (every Turn ended, every call decided), read the store, then
    ``session.items`` (again, until it has caught up with the store: storage publishes after
    it writes), ``runtime.deliveries`` and ``runtime.observations`` from where they stood when
    the load began, and check. ``faults_at``: the wall-clock moments of the faults; how many
    inputs were in flight at each is counted (``Verdict.in_flight``)."""
    for _ in range(3):  # settled, yet a Turn opened meanwhile (a late hand-over): once more
        unsettled = await settle(api, load)
        store = {}
        for run in load.runs:
            if run.session_id is not None:
                items = await read_items(api, run.session_id)
                assert items is not None, run.session_id
                store[run.session_id] = items
        if unsettled or not any(turns_open(i) or calls_undecided(i) for i in store.values()):
            break
    topics = topics_for(core.settings)
    deadline = time.monotonic() + 30
    while True:
        topic = await read_topic(core.settings, topics.session_items, since)
        behind = [sid for sid, items in store.items()
                  if not {it["id"] for it in items} <= {it["id"] for it in topic.get(sid, [])}]
        if not behind or time.monotonic() > deadline:
            break
        await asyncio.sleep(1.0)
    deliveries = await read_topic(core.settings, topics.runtime_deliveries, since)
    observations = await read_topic(core.settings, topics.runtime_observations, since)
    v = check(load, store, topic, deliveries, observations)
    v.unsettled = unsettled
    v.in_flight = [in_flight_at(load, t, topic, deliveries) for t in faults_at or []]
    return v


def done_at(inp: Input, topic: list[Json], deliveries: list[Json]) -> float:
    """When the system had finished with ``inp`` (wall clock, from the records' Kafka
    timestamps): the latest of its Item's first publication on ``session.items``, the first
    ``runtime.deliveries`` record carrying it and, for a message, the end of the Turn it ran in
    (the harness works on it until then); for a function result, its call's verdict's first
    publication. ``inf`` when one of them is missing (a loss: the checks report it)."""
    def first(stamps: list[float]) -> float:
        return min(stamps) if stamps else float("inf")

    if inp.kind == "result":
        item = first([it[TS] for it in topic if it.get("type") == "function_call_output"
                      and it.get("call_id") == inp.call_id])
        verdict = first([it[TS] for it in topic if it.get("type") == "function_call_application"
                         and it.get("call_id") == inp.call_id])
        delivered = first([d[TS] for d in deliveries if d.get("kind") == "function_result"
                           and d.get("call_id") == inp.call_id])
        return max(item, verdict, delivered)
    mine = [it for it in topic if it.get("type") == "message"
            and inp.key in [p.get("text") for p in it.get("content", [])]]
    item = first([it[TS] for it in mine])
    delivered = first([d[TS] for d in deliveries if d.get("kind") in ("start", "steer")
                       and any(m.get("content") == inp.content for m in d.get("messages", []))])
    turns = {it.get("turn_id") for it in mine}
    ended = first([it[TS] for it in topic if it.get("type") == "turn"
                   and it.get("turn_id") in turns and it.get("state") in ("completed", "failed")])
    return max(item, delivered, ended)


def in_flight_at(load: Load, at: float, topic: dict[str, list[Json]],
                 deliveries: dict[str, list[Json]]) -> int:
    """How many of the load's inputs were in flight or being processed at wall-clock time
    ``at`` (a fault): sent (first attempt begun) before it, and not yet done with (``done_at``:
    stored, published, delivered to the Runtime and, for a result, decided) by then."""
    n = 0
    for run in load.runs:
        sid = run.session_id or ""
        mine, dl = topic.get(sid, []), deliveries.get(sid, [])
        for inp in run.inputs:
            if inp.sent_at is not None and inp.sent_at <= at < done_at(inp, mine, dl):
                n += 1
    return n

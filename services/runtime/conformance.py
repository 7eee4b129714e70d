"""``session-core conformance``: qualify a Runtime over the wire (docs/reference-runtime.md).

The kit plays Core's part: it publishes ``runtime.delivery/1`` records for synthetic Sessions to
one Runtime, reads that Runtime's ``runtime.observation/1`` records and checks them — receipts
with ``shared.domain.receipts`` exactly as the receipt tracker does. Either it qualifies a running
Runtime (``--runtime-id``; its harness and capabilities come from its registration) or it starts
a reference Runtime in-process (``--harness``, switches). It prints a PASS / FAIL / SKIP table
and exits 1 when any case fails.

Cases (each on its own Session, run concurrently):

=============================  ==================================================================
message_images                 images reach the harness as native image blocks, in order, with
                               the message's text around them, and the Turn then ends completed
                               (skipped without the capability)
text_only_rejects_images       a text-only harness (or a Runtime without message images) refuses
                               an image message terminally and records no part of it
function_result_images         a result of text and images confirms: a native image at every
                               image position
text_exactness                 a failed result with whitespace, empty, non-ASCII and error text
                               confirms with every text exactly as delivered
release_handling               a call pending when its Turn is superseded is released natively;
                               a result for it afterwards is refused, never applied
no_replay_synthetic_subagent   no replayed, synthetic or Subagent record answers a result; a
                               live root record confirms it
receipt_within_10s             the confirming record arrives within 10 s of the delivery
claude_64_bound                Claude Code: 63 and 64 user messages in a Turn are taken; the 65th
                               and a batch that would pass 64 are refused before any part is
                               submitted (refusal code turn_message_bound_exceeded), and the
                               native Turn ends failed
=============================  ==================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer

from services.runtime.app import RuntimeConfig, RuntimeService
from services.runtime.harness import HARNESSES
from services.runtime.main import add_switch_flags, settings_from_args, switches_from_args
from shared import records
from shared.domain import receipts
from shared.domain.adapters import codex
from shared.domain.delivery import (
    REFUSAL_TURN_BOUND_EXCEEDED,
    function_result_delivery,
    message_delivery,
    result_content,
)
from shared.domain.observations import CallOpened, TurnEnded, classify
from shared.ids import new_id
from shared.kafka import (
    assigned_consumer,
    decode,
    ensure_topics,
    make_broker,
    publish,
)
from shared.logging import get_logger
from shared.settings import Settings, get_settings
from shared.topics import Topics, topics_for

log = get_logger(__name__)

Json = dict[str, Any]

# 1×1 images, canonical base64 (the Runtime does not decode them; the Core admission would).
PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQ"
    "DwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
PNG_RED = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z/C/"
    "HgAGgwJ/lK3Q6wAAAABJRU5ErkJggg=="
)
JPEG = (
    "data:image/jpeg;base64,/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8U"
    "HRofHh0aHBwgJC4nICIsIxwcKDcpLDAxNDQ0Hyc5PTgyPC4zNDL/wAALCAABAAEBAREA/8QAFAABAAAAAAAAAAAA"
    "AAAAAAAACf/EABQQAQAAAAAAAAAAAAAAAAAAAAD/2gAIAQEAAD8AKp//2Q=="
)

RECEIPT_LIMIT_S = receipts.RECEIPT_WINDOW_S
WAIT_S = 15.0  # how long any case waits for a record (past the 10 s window on purpose)
# A real harness starts one process per Session (several at once under the kit, on a shared
# machine: seconds each) before its first record: the waits for a Turn's records allow that.
# The receipt window itself is still measured from the result's delivery (receipt_within_10s).
REAL_WAIT_S = 60.0

CASES = (
    "message_images",
    "text_only_rejects_images",
    "function_result_images",
    "text_exactness",
    "release_handling",
    "no_replay_synthetic_subagent",
    "receipt_within_10s",
    "claude_64_bound",
)


def t(text: str) -> Json:
    return {"type": "input_text", "text": text}


def img(url: str) -> Json:
    return {"type": "input_image", "image_url": url}


def msg(*parts: Json) -> Json:
    return {"role": "user", "content": list(parts)}


@dataclass
class CaseResult:
    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str
    seconds: float = 0.0

    def as_dict(self) -> Json:
        return {"case": self.name, "status": self.status, "detail": self.detail,
                "seconds": round(self.seconds, 3)}


@dataclass
class RuntimeUnderTest:
    runtime_id: str
    harness: str
    message_images: bool
    function_result_images: bool
    switches: Json = field(default_factory=dict)
    # the real engine: the scripted model's registry (each case scripts the model's calls)
    scripts: Any = None
    engine: str = "simulated"
    wait_s: float = WAIT_S  # how long a case waits for a Turn's records (not for a receipt)


# The public functions the kit's cases call (the real engine exposes them as the harness's tools)
KIT_FUNCTIONS = [{"name": n, "description": f"conformance function {n}",
                  "parameters": {"type": "object", "properties": {"case": {"type": "string"}}}}
                 for n in ("render_chart", "exact_text", "slow_tool", "lookup", "timed")]


class Failed(Exception):
    """A case's check failed (the message is the table's detail)."""


# --------------------------------------------------------------------------- the wire


class Wire:
    """Publishes deliveries and control records; fans the observations out by session_id."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics: Topics = topics_for(settings)
        self.broker = make_broker(settings, client_id="session-core-conformance")
        self.queues: dict[str, asyncio.Queue[Json]] = {}
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await self.broker.start()
        self._consumer = await _assigned(self.settings, self.topics.runtime_observations, end=True)
        self._task = asyncio.create_task(self._run(), name="conformance:observations")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._consumer is not None:
            await self._consumer.stop()
        await self.broker.stop()

    async def _run(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=100)
            for recs in batches.values():
                for r in recs:
                    with contextlib.suppress(ValueError):
                        value = decode(r.value or b"")
                        if isinstance(value, dict):
                            q = self.queues.get(str(value.get("session_id")))
                            if q is not None:
                                q.put_nowait(value)

    def listen(self, session_id: str) -> asyncio.Queue[Json]:
        q: asyncio.Queue[Json] = asyncio.Queue()
        self.queues[session_id] = q
        return q

    async def deliver(self, record: Json) -> None:
        await publish(self.broker, self.topics.runtime_deliveries, record,
                      key=str(record["runtime_id"]))

    async def control(self, runtime_id: str, changes: Json) -> None:
        await publish(self.broker, self.topics.runtime_control,
                      records.control_record(runtime_id, changes), key=runtime_id)

    async def registration(self, runtime_id: str, wait_s: float,
                           accept: Callable[[Json], bool] = lambda r: True) -> Json | None:
        """The newest registration of ``runtime_id`` that ``accept`` likes, waiting up to
        ``timeout`` seconds for one to arrive."""
        c = await _assigned(self.settings, self.topics.runtime_registrations, end=False)
        found: Json | None = None
        deadline = time.monotonic() + wait_s
        try:
            while time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=200)
                for recs in batches.values():
                    for r in recs:
                        with contextlib.suppress(ValueError):
                            value = decode(r.value or b"")
                            if isinstance(value, dict) and value.get("runtime_id") == runtime_id:
                                found = value
                if not batches and found is not None and accept(found):
                    return found
            return found if found is not None and accept(found) else None
        finally:
            await c.stop()


async def _assigned(settings: Settings, topic: str, *, end: bool) -> AIOKafkaConsumer:
    return await assigned_consumer(settings, topic, at_end=end)


# --------------------------------------------------------------------------- one Session


@dataclass
class Call:
    call_id: str
    name: str
    turn_id: str
    native_ids: Json


class Probe:
    """One synthetic Core Session driven against the Runtime under test."""

    def __init__(self, wire: Wire, rt: RuntimeUnderTest) -> None:
        self.wire = wire
        self.rt = rt
        self.session_id = new_id("session")
        self.queue = wire.listen(self.session_id)
        self.seen: list[Json] = []

    async def send(self, kind: str, turn_id: str, messages: list[Json]) -> str:
        did = new_id("dlv")
        await self.wire.deliver(message_delivery(
            delivery_id=did, runtime_id=self.rt.runtime_id, session_id=self.session_id,
            turn_id=turn_id, kind=kind, messages=messages,  # type: ignore[arg-type]
        ))
        return did

    async def send_result(self, call: Call, success: bool, output: Any, error: str | None
                          ) -> tuple[str, list[Json]]:
        did = new_id("dlv")
        record = function_result_delivery(
            delivery_id=did, runtime_id=self.rt.runtime_id, session_id=self.session_id,
            turn_id=call.turn_id, call_id=call.call_id, name=call.name, success=success,
            output=output, error=error,
        )
        await self.wire.deliver(record)
        return did, record["content"]

    async def until(self, pred: Callable[[Json], bool], wait_s: float | None = None
                    ) -> Json | None:
        """The next observation matching ``pred`` (all observations are kept in ``seen``)."""
        deadline = time.monotonic() + (self.rt.wait_s if wait_s is None else wait_s)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                obs = await asyncio.wait_for(self.queue.get(), left)
            except TimeoutError:
                return None
            self.seen.append(obs)
            if pred(obs):
                return obs

    async def turn_end(self, turn_id: str, wait_s: float | None = None) -> Json | None:
        for obs in self.seen:
            if obs.get("turn_id") == turn_id and self._is_turn_end(obs):
                return obs
        return await self.until(
            lambda o: o.get("turn_id") == turn_id and self._is_turn_end(o), wait_s)

    def _is_turn_end(self, obs: Json) -> bool:
        # A Claude Code ``result`` after which queued input of the same Turn runs as a
        # follow-up command is marked ``native_turn_continues`` by the Runtime: not the end of
        # Core's Turn (storage skips it the same way).
        return isinstance(classify(self.rt.harness, obs.get("native")), TurnEnded) and not \
            obs.get("native_turn_continues")

    async def open_call(self, name: str, args: Json) -> Call:
        turn_id = new_id("turn")
        prompt = f"please call {name} {json.dumps(args)}"
        if self.rt.scripts is not None:  # a real harness: script the model to make the call
            marker = "kit-" + new_id("req")
            self.rt.scripts.register(marker, [[{"tool_call": {"name": name, "arguments": args}}],
                                              [{"text": "done"}]])
            prompt = f"{marker} {prompt}"
        await self.send("start", turn_id, [msg(t(prompt))])
        obs = await self.until(
            lambda o: isinstance(classify(self.rt.harness, o.get("native")), CallOpened))
        if obs is None:
            raise Failed(f"no native function call within {self.rt.wait_s:g} s of "
                         f"'call {name} …'")
        c = classify(self.rt.harness, obs.get("native"))
        assert isinstance(c, CallOpened)
        if c.name != name or c.arguments != args:
            raise Failed(f"the call announced {c.name} {c.arguments!r}, asked {name} {args!r}")
        return Call(c.call_id, c.name, str(obs.get("turn_id") or turn_id), c.native_ids)

    def expected(self, call: Call, success: bool, content: list[Json]) -> receipts.Expected:
        return receipts.expect(
            harness=self.rt.harness, session_id=self.session_id, call_id=call.call_id,
            name=call.name, success=success, content=content,
            native_session_id=call.native_ids.get("session_id"),
            thread_id=call.native_ids.get("thread_id"),
            turn_id=call.native_ids.get("turn_id"),
        )

    async def receipt(self, exp: receipts.Expected, wait_s: float = WAIT_S
                      ) -> tuple[receipts.Verdict | None, float, list[receipts.NotAMatch]]:
        """Wait for a Confirmed or Released verdict; also returns the near misses (records
        that name the call but do not confirm it)."""
        started = time.monotonic()
        misses: list[receipts.NotAMatch] = []

        def decisive(o: Json) -> bool:
            if o.get("native") is None:
                return _refusal_for(o, exp.call_id)
            v = receipts.match_observation(exp, o)
            if isinstance(v, receipts.NotAMatch):
                if _names_call(o, exp.call_id):
                    misses.append(v)
                return False
            return True

        obs = await self.until(decisive, wait_s)
        elapsed = time.monotonic() - started
        if obs is None:
            return None, elapsed, misses
        if obs.get("native") is None:
            misses.append(receipts.NotAMatch("refusal", f"refused: {obs['refusal'].get('reason')}"))
            return None, elapsed, misses
        return receipts.match_observation(exp, obs), elapsed, misses

    def received(self) -> list[Json]:
        """The native records of input the harness took (Claude Code user messages echoed
        back, Codex ``userMessage`` items), in order."""
        out = []
        for o in self.seen:
            n = o.get("native")
            if not isinstance(n, dict):
                continue
            if self.rt.harness == codex.HARNESS:
                item = (n.get("params") or {}).get("item") or {}
                if n.get("method") == "item/completed" and item.get("type") == "userMessage":
                    out.append(n)
            elif n.get("type") == "user" and not _tool_results(n):
                out.append(n)
        return out

    def taken(self) -> set[str]:
        """The native message uuids the harness recorded taking: echoed back (``isReplay``),
        or queued as a command (real Claude Code prints ``command_lifecycle`` ``queued`` with
        our uuid when it takes a message into its queue; a message still queued when the Turn
        is interrupted is cancelled, never echoed)."""
        out = set()
        for o in self.seen:
            n = o.get("native")
            if not isinstance(n, dict):
                continue
            if n.get("type") == "user" and n.get("isReplay") is True and not _tool_results(n):
                out.add(str(n.get("uuid")))
            elif n.get("type") == "command_lifecycle" and n.get("state") == "queued":
                out.add(str(n.get("command_uuid")))
        return out

    def refusals(self) -> list[Json]:
        return [o["refusal"] for o in self.seen if o.get("native") is None and o.get("refusal")]


def _tool_results(native: Mapping[str, Any]) -> list[Json]:
    message = native.get("message")
    blocks = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(blocks, list):
        return []
    return [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]


def _names_call(obs: Mapping[str, Any], call_id: str) -> bool:
    n = obs.get("native")
    if not isinstance(n, Mapping):
        return False
    if any(b.get("tool_use_id") == call_id for b in _tool_results(n)):
        return True
    item = (n.get("params") or {}).get("item") if isinstance(n.get("params"), Mapping) else None
    return isinstance(item, Mapping) and item.get("id") == call_id and item.get(
        "type") == "dynamicToolCall" and n.get("method") == "item/completed"


def _refusal_for(obs: Mapping[str, Any], call_id: str) -> bool:
    r = obs.get("refusal")
    return isinstance(r, Mapping) and r.get("call_id") == call_id


def _texts(native: Mapping[str, Any]) -> list[str]:
    message = native.get("message")
    blocks = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(blocks, list):
        return []
    return [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"]


def _claude_blocks(content: list[Json]) -> list[Json]:
    out = []
    for p in content:
        if p["type"] == "input_text":
            out.append({"type": "text", "text": p["text"]})
        else:
            header, _, data = p["image_url"][5:].partition(",")
            out.append({"type": "image", "source": {
                "type": "base64", "media_type": header.split(";")[0], "data": data}})
    return out


# --------------------------------------------------------------------------- the cases

Case = Callable[[Wire, RuntimeUnderTest], Awaitable[str]]


def _skip(reason: str) -> str:
    return "SKIP:" + reason


async def case_message_images(wire: Wire, rt: RuntimeUnderTest) -> str:
    if not rt.message_images:
        return _skip("the runtime does not report message images")
    p = Probe(wire, rt)
    messages = [msg(t("look at these"), img(PNG), t("and"), img(JPEG)), msg(img(PNG_RED))]
    turn_id = new_id("turn")
    await p.send("start", turn_id, messages)
    end = await p.turn_end(turn_id)
    if p.refusals():
        raise Failed(f"refused: {p.refusals()[0].get('reason')}")
    ended = classify(rt.harness, end.get("native")) if end is not None else None
    if not isinstance(ended, TurnEnded) or ended.state != "completed":
        raise Failed("the Turn did not end completed after taking the input "
                     f"({ended.state if isinstance(ended, TurnEnded) else 'no end'})")
    got = p.received()
    if rt.harness == codex.HARNESS:
        want = codex.flatten_messages(messages)
        # the real app-server adds ``text_elements`` to text entries and ``detail: null`` to
        # images: compare what the adapter sends (type, text, url)
        items = [[{k: v for k, v in i.items() if k in ("type", "text", "url")} for i in
                  n["params"]["item"]["content"]] for n in got]
        if items != [want]:
            raise Failed(f"native input differs: want {want!r:.160}, got {items!r:.160}")
        return "one native input list: 5 parts + separator, images as data URIs in order"
    blocks = [n["message"]["content"] for n in got]
    want_blocks = [_claude_blocks(m["content"]) for m in messages]
    if blocks != want_blocks:
        raise Failed(f"native user messages differ: want {want_blocks!r:.120}, "
                     f"got {blocks!r:.120}")
    return "2 native user messages, 3 native image blocks in order, text exact"


async def case_text_only_rejects_images(wire: Wire, rt: RuntimeUnderTest) -> str:
    if rt.message_images:
        return _skip("the runtime takes message images (message_images checks them)")
    p = Probe(wire, rt)
    turn_id = new_id("turn")
    did = await p.send("start", turn_id, [msg(t("marker-text-only"), img(PNG))])
    refusal = await p.until(lambda o: o.get("native") is None and bool(o.get("refusal")))
    if refusal is None:
        raise Failed(f"no refusal within {rt.wait_s:g} s")
    r = refusal["refusal"]
    if r.get("delivery_id") != did or r.get("terminal") is not True:
        raise Failed(f"refusal not terminal for the delivery: {r!r}")
    await p.turn_end(turn_id, wait_s=3)
    taken = [n for n in p.received() if "marker-text-only" in json.dumps(n)]
    if taken:
        raise Failed("part of the image message reached the harness (dropped, not refused)")
    return f"refused terminally: {r.get('reason')}"


async def _result_case(
    wire: Wire, rt: RuntimeUnderTest, name: str, success: bool, output: Any, error: str | None,
) -> tuple[receipts.Verdict | None, float, list[receipts.NotAMatch], Probe]:
    p = Probe(wire, rt)
    call = await p.open_call(name, {"case": name})
    _, content = await p.send_result(call, success, output, error)
    verdict, elapsed, misses = await p.receipt(p.expected(call, success, content))
    return verdict, elapsed, misses, p


def _no_functions(rt: RuntimeUnderTest) -> bool:
    return rt.harness == "minimax_code"


def _explain(verdict: receipts.Verdict | None, misses: list[receipts.NotAMatch]) -> str:
    if isinstance(verdict, receipts.Released):
        return "the harness released the call instead of applying the result"
    if misses:
        return "; ".join(m.reason for m in misses)[:200]
    return f"no confirming record within {WAIT_S:g} s"


async def case_function_result_images(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    if not rt.function_result_images:
        return _skip("the runtime does not report function-result images")
    output = [t("chart:"), img(PNG), t("photo:"), img(JPEG), img(PNG_RED)]
    verdict, elapsed, misses, _ = await _result_case(wire, rt, "render_chart", True, output, None)
    if not isinstance(verdict, receipts.Confirmed):
        raise Failed(_explain(verdict, misses))
    return f"confirmed in {elapsed:.2f} s: a native image at each of 3 image positions"


async def case_text_exactness(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    output = [t("  padded  "), t(""), t("é 漢字 \u0085\ufeff\n\t"), t("🙂 \\n \"quoted\"")]
    verdict, elapsed, misses, _ = await _result_case(
        wire, rt, "exact_text", False, output, "boom: the tool failed\n")
    if not isinstance(verdict, receipts.Confirmed):
        raise Failed(_explain(verdict, misses))
    return f"confirmed in {elapsed:.2f} s: 5 text blocks (4 output + error) byte-exact"


async def case_release_handling(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    p = Probe(wire, rt)
    call = await p.open_call("slow_tool", {"case": "release"})
    exp = p.expected(call, True, result_content("late", None))
    await p.send("start", new_id("turn"), [msg(t("a new turn supersedes the old one"))])
    released = await p.until(
        lambda o: isinstance(o.get("native"), dict)
        and isinstance(receipts.match_observation(exp, o), receipts.Released))
    if released is None:
        raise Failed("the pending call was not released natively when its Turn was superseded")
    if await p.turn_end(call.turn_id, wait_s=5) is None:
        raise Failed("the superseded Turn did not end")
    await p.send_result(call, True, "late", None)
    verdict, _, _ = await p.receipt(exp, wait_s=5)
    if isinstance(verdict, receipts.Confirmed):
        raise Failed("a result for a released call was applied")
    if not p.refusals() or not any(r.get("call_id") == call.call_id for r in p.refusals()):
        raise Failed("a result for a released call was neither applied nor refused")
    return "released natively on supersede; the late result refused terminally"


async def case_no_replay_synthetic_subagent(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    verdict, _, misses, _ = await _result_case(wire, rt, "lookup", True, "plain answer", None)
    flagged = [m for m in misses if m.field in (
        "isReplay", "isSynthetic", "parent_tool_use_id", "threadId", "turnId")]
    if flagged:
        raise Failed("; ".join(m.reason for m in flagged)[:200])
    if not isinstance(verdict, receipts.Confirmed):
        raise Failed(_explain(verdict, misses))
    return "one live root record confirmed; no replayed/synthetic/Subagent record"


async def case_receipt_within_10s(wire: Wire, rt: RuntimeUnderTest) -> str:
    if _no_functions(rt):
        return _skip(f"{rt.harness} has no public functions")
    verdict, elapsed, misses, _ = await _result_case(wire, rt, "timed", True, "on time", None)
    if not isinstance(verdict, receipts.Confirmed):
        raise Failed(_explain(verdict, misses))
    if elapsed > RECEIPT_LIMIT_S:
        raise Failed(f"confirmed after {elapsed:.2f} s, past the {RECEIPT_LIMIT_S:g} s window")
    return f"confirmed {elapsed * 1000:.0f} ms after the delivery"


async def case_claude_64_bound(wire: Wire, rt: RuntimeUnderTest) -> str:
    if rt.harness != "claude_code":
        return _skip("the 64-message bound is Claude Code's")
    # Session A: 1 + 62 = 63 taken, +1 = 64 taken, +1 = 65 refused.
    a = Probe(wire, rt)
    turn_a = new_id("turn")
    await a.send("start", turn_a, [msg(t("A-0"))])
    await a.send("steer", turn_a, [msg(t(f"A-{k}")) for k in range(1, 63)])
    await a.send("steer", turn_a, [msg(t("A-63"))])
    d65 = await a.send("steer", turn_a, [msg(t("A-64"))])
    # Session B: 63 taken, then a batch of 2 (would be 65) refused as a whole.
    b = Probe(wire, rt)
    turn_b = new_id("turn")
    await b.send("start", turn_b, [msg(t(f"B-{k}")) for k in range(63)])
    d_batch = await b.send("steer", turn_b, [msg(t("B-63")), msg(t("B-64"))])
    end_a, end_b = await asyncio.gather(a.turn_end(turn_a), b.turn_end(turn_b))
    problems = []
    for probe, end, last_ok, refused_did, refused_texts in (
        (a, end_a, 64, d65, {"A-64"}),
        (b, end_b, 63, d_batch, {"B-63", "B-64"}),
    ):
        taken = [x for n in probe.received() for x in _texts(n)]
        if len(probe.taken()) != last_ok:
            problems.append(f"{len(probe.taken())} user messages taken, want {last_ok}")
        if refused_texts & set(taken):
            problems.append(f"part of the refused batch was submitted: "
                            f"{sorted(refused_texts & set(taken))}")
        rs = [r for r in probe.refusals() if r.get("delivery_id") == refused_did]
        if not rs or rs[0].get("terminal") is not True:
            problems.append("the batch over the bound was not refused terminally")
        elif rs[0].get("code") != REFUSAL_TURN_BOUND_EXCEEDED:
            problems.append(f"the refusal's code is {rs[0].get('code')!r}, want "
                            f"{REFUSAL_TURN_BOUND_EXCEEDED!r} (Core ends its Turn from the "
                            "native end that must follow)")
        if end is None or not _failed_end(end):
            problems.append("the Turn did not end failed after the refusal")
    if problems:
        raise Failed("; ".join(problems))
    return "63 and 64 taken; 65th message and a 2-message batch past 64 refused, Turn failed"


def _failed_end(obs: Json) -> bool:
    c = classify("claude_code", obs.get("native"))
    return isinstance(c, TurnEnded) and c.state == "failed"


CASE_FUNCS: dict[str, Case] = {
    "message_images": case_message_images,
    "text_only_rejects_images": case_text_only_rejects_images,
    "function_result_images": case_function_result_images,
    "text_exactness": case_text_exactness,
    "release_handling": case_release_handling,
    "no_replay_synthetic_subagent": case_no_replay_synthetic_subagent,
    "receipt_within_10s": case_receipt_within_10s,
    "claude_64_bound": case_claude_64_bound,
}


async def _run_case(name: str, wire: Wire, rt: RuntimeUnderTest) -> CaseResult:
    started = time.monotonic()
    try:
        detail = await CASE_FUNCS[name](wire, rt)
        status = "PASS"
        if detail.startswith("SKIP:"):
            status, detail = "SKIP", detail[5:]
    except Failed as exc:
        status, detail = "FAIL", str(exc)
    except Exception as exc:  # a crash in a case is that case's failure, not the kit's
        log.exception("conformance.case_error", case=name)
        status, detail = "FAIL", f"error: {exc!r}"
    return CaseResult(name, status, detail, time.monotonic() - started)


# --------------------------------------------------------------------------- the kit


@dataclass
class KitOptions:
    runtime_id: str | None = None  # qualify a running Runtime; None: start one in-process
    harness: str = "claude_code"
    message_images: bool | None = None
    function_result_images: bool | None = None
    switches: Json = field(default_factory=dict)  # applied (control record / in-process config)
    cases: tuple[str, ...] = CASES
    registration_timeout_s: float = 15.0
    engine: str = "simulated"  # "real": an in-process Runtime driving the real harness binary
    model_base_url: str | None = None  # real engine: None starts a scripted model server
    corrupt: str | None = None  # real engine: a broken adapter (drop_image | alter_text)


async def run_kit(
    settings: Settings, opts: KitOptions
) -> tuple[RuntimeUnderTest, list[CaseResult]]:
    """Run the qualification cases; returns the Runtime under test and one result per case."""
    wire = Wire(settings)
    await wire.start()
    svc: RuntimeService | None = None
    restore: Json = {}
    model: Any = None
    try:
        if opts.runtime_id is None and opts.engine == "real":
            from services.modelserver.server import ModelServer
            from services.runtime.live import LiveOptions
            from services.runtime.live import build as build_live

            model = ModelServer().start()
            images = opts.message_images if opts.message_images is not None else True
            config = RuntimeConfig(runtime_id=new_id("rt"), harness=opts.harness)
            live = build_live(LiveOptions(
                runtime_id=config.runtime_id, harness=opts.harness,
                model_base_url=opts.model_base_url or model.url + (
                    "/v1" if opts.harness == "codex" else ""),
                images=images, functions=KIT_FUNCTIONS, corrupt=opts.corrupt))
            svc = RuntimeService(settings, config, live=live)
            await svc.start()
            caps = live.capabilities()
            rt = RuntimeUnderTest(config.runtime_id, config.harness, caps["message_images"],
                                  caps["function_result_images"],
                                  {"corrupt": opts.corrupt} if opts.corrupt else {},
                                  scripts=model.scripts, engine="real", wait_s=REAL_WAIT_S)
        elif opts.runtime_id is None:
            from services.runtime.switches import Switches

            text_only = opts.harness == "minimax_code"
            config = RuntimeConfig(
                runtime_id=new_id("rt"),
                harness=opts.harness,
                message_images=(not text_only if opts.message_images is None
                                else opts.message_images),
                function_result_images=(not text_only if opts.function_result_images is None
                                        else opts.function_result_images),
                switches=Switches().updated(opts.switches),
            )
            svc = RuntimeService(settings, config)
            await svc.start()
            rt = RuntimeUnderTest(config.runtime_id, config.harness, svc.harness.message_images,
                                  svc.harness.function_result_images, svc.harness.switches.active())
        else:
            rt = await _external(wire, opts, restore)
        results = await asyncio.gather(*(_run_case(n, wire, rt) for n in opts.cases))
        return rt, list(results)
    finally:
        if restore and opts.runtime_id is not None:
            await wire.control(opts.runtime_id, restore)
        if svc is not None:
            await svc.stop()
        if model is not None:
            model.stop()
        await wire.stop()


async def _external(wire: Wire, opts: KitOptions, restore: Json) -> RuntimeUnderTest:
    assert opts.runtime_id is not None
    reg = await wire.registration(opts.runtime_id, opts.registration_timeout_s,
                                  lambda r: r.get("status") != "gone")
    if reg is None:
        raise SystemExit(f"conformance: no live registration of {opts.runtime_id} on "
                         f"{wire.topics.runtime_registrations}")
    if opts.harness and reg.get("harness") != opts.harness:
        raise SystemExit(f"conformance: {opts.runtime_id} runs {reg.get('harness')}, "
                         f"not {opts.harness}")
    if opts.switches:
        from services.runtime.switches import Switches

        before = reg.get("switches") or {}
        default = Switches().as_dict()
        restore.update({k: before.get(k, default[k]) for k in opts.switches})
        await wire.control(opts.runtime_id, opts.switches)
        want = Switches().updated({**before, **opts.switches}).active()
        reg = await wire.registration(
            opts.runtime_id, opts.registration_timeout_s,
            lambda r: (r.get("switches") or {}) == want)
        if reg is None:
            raise SystemExit("conformance: the runtime did not confirm the switches "
                             "(does it read runtime.control?)")
    caps = reg.get("capabilities") or {}
    return RuntimeUnderTest(
        str(reg["runtime_id"]), str(reg["harness"]), bool(caps.get("message_images")),
        bool(caps.get("function_result_images")), dict(reg.get("switches") or {}),
    )


def render(rt: RuntimeUnderTest, results: list[CaseResult]) -> str:
    sw = ", ".join(f"{k}={v}" for k, v in rt.switches.items()) or "none"
    lines = [
        f"Conformance of runtime {rt.runtime_id} ({rt.harness}, {rt.engine} engine; "
        "message_images="
        f"{'yes' if rt.message_images else 'no'}, function_result_images="
        f"{'yes' if rt.function_result_images else 'no'}; switches: {sw})",
        "",
        f"{'CASE':<30} {'RESULT':<6} {'TIME':>7}  DETAIL",
    ]
    for r in results:
        lines.append(f"{r.name:<30} {r.status:<6} {r.seconds:>6.2f}s  {r.detail}")
    n = {s: sum(1 for r in results if r.status == s) for s in ("PASS", "FAIL", "SKIP")}
    lines += ["", f"{len(results)} cases: {n['PASS']} passed, {n['FAIL']} failed, "
              f"{n['SKIP']} skipped"]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="session-core conformance",
        description="Qualify a Runtime over the wire: publish deliveries to it, check its "
        "native observations with the receipt rules, print PASS/FAIL per case.",
    )
    p.add_argument("--runtime-id", help="qualify this running Runtime (default: start a "
                   "reference Runtime in-process)")
    p.add_argument("--harness", choices=HARNESSES, default=None,
                   help="harness of the in-process Runtime (default claude_code); with "
                   "--runtime-id, the harness it must run")
    p.add_argument("--message-images", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--function-result-images", action=argparse.BooleanOptionalAction,
                   default=None)
    p.add_argument("--cases", help=f"comma-separated subset of: {', '.join(CASES)}")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.add_argument("--engine", choices=("simulated", "real"), default="simulated",
                   help="real: start an in-process Runtime driving the real harness binary "
                   "against a scripted model server (docs/harnesses.md)")
    p.add_argument("--model-base-url", default=None,
                   help="real engine: the model endpoint (default: an in-process scripted one)")
    p.add_argument("--corrupt", choices=("drop_image", "alter_text"), default=None,
                   help="real engine: a broken adapter that corrupts what it sends (the kit "
                   "must then fail)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: settings)")
    p.add_argument("--topic-prefix", help="topic prefix (default: settings)")
    add_switch_flags(p)
    return p


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    cases = CASES
    if args.cases:
        cases = tuple(c.strip() for c in args.cases.split(",") if c.strip())
        unknown = [c for c in cases if c not in CASES]
        if unknown:
            parser.error(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
    try:
        switches = switches_from_args(args, environ={})
    except ValueError as exc:
        parser.error(str(exc))
    changed = {k: v for k, v in switches.as_dict().items() if k in switches.active()}
    opts = KitOptions(
        runtime_id=args.runtime_id,
        harness=args.harness or ("" if args.runtime_id else "claude_code"),
        message_images=args.message_images,
        function_result_images=args.function_result_images,
        switches=changed,
        cases=cases,
        engine=args.engine,
        model_base_url=args.model_base_url,
        corrupt=args.corrupt,
    )
    settings = settings_from_args(args, get_settings())
    rt, results = asyncio.run(run_kit(settings, opts))
    if args.json:
        print(json.dumps({
            "runtime_id": rt.runtime_id, "harness": rt.harness, "switches": rt.switches,
            "results": [r.as_dict() for r in results],
            "passed": all(r.status != "FAIL" for r in results),
        }))
    else:
        print(render(rt, results))
    raise SystemExit(1 if any(r.status == "FAIL" for r in results) else 0)


__all__ = ["CASES", "CaseResult", "KitOptions", "main", "render", "run_kit"]

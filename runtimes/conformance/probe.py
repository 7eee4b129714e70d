"""The conformance kit's wire and probe: Kafka in and out for one Runtime under test, one
Session's deliveries and observations, and the content builders the cases use."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer

from shared import records
from shared.domain import receipts
from shared.domain.harnesses import codex
from shared.domain.observations import CallOpened, TurnEnded, classify
from shared.domain.wire import (
    function_result_delivery,
    interrupt_delivery,
    message_delivery,
)
from shared.ids import new_id
from shared.kafka import (
    assigned_consumer,
    decode,
    ensure_topics,
    make_broker,
    publish,
    stop_consumer,
)
from shared.logging import get_logger
from shared.settings import Settings
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
    "interrupt",
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
            await stop_consumer(self._consumer)
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

    async def send_interrupt(self, turn_id: str, reason: str) -> str:
        """Core failed ``turn_id``: the Runtime is to end the native Turn."""
        did = "int_" + new_id("dlv").removeprefix("dlv_")
        await self.wire.deliver(interrupt_delivery(
            delivery_id=did, runtime_id=self.rt.runtime_id, session_id=self.session_id,
            turn_id=turn_id, reason=reason))
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


def texts(native: Mapping[str, Any]) -> list[str]:
    message = native.get("message")
    blocks = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(blocks, list):
        return []
    return [b["text"] for b in blocks if isinstance(b, dict) and b.get("type") == "text"]


def claude_blocks(content: list[Json]) -> list[Json]:
    out = []
    for p in content:
        if p["type"] == "input_text":
            out.append({"type": "text", "text": p["text"]})
        else:
            header, _, data = p["image_url"][5:].partition(",")
            out.append({"type": "image", "source": {
                "type": "base64", "media_type": header.split(";")[0], "data": data}})
    return out

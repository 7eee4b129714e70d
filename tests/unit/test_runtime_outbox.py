"""The Runtime's observation outbox (``runtimes/outbox.py``): records leave in the order
the harness made them; with ``hold_s`` (the real harnesses) a record that carries no fact waits
for the ones behind it, and a fact — a function call, a Turn's end, a refusal — never waits and
takes what waits ahead of it along."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from runtimes.harness import Emit
from runtimes.outbox import ObservationOutbox

SID = "session_" + "b" * 32


class Producer:
    """Notes each send: loop time, what it was, wall clock."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []
        self.wall: list[datetime] = []

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[None]:
        import json

        rec = json.loads(value)
        native = rec["native"] or {}
        self.sent.append((asyncio.get_running_loop().time(),
                          native.get("method") or native.get("type") or "refusal"))
        self.wall.append(datetime.now(UTC))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


def codex(method: str, **params: Any) -> Emit:
    return Emit({"schema": "runtime.observation/1", "session_id": SID, "harness": "codex",
                 "turn_id": "turn_1", "native": {"method": method, "params": params}})


TURN_DONE = {"turn": {"id": "t1", "status": "completed"}}
TOOL_ITEM = {"item": {"type": "dynamicToolCall", "id": "call_1", "tool": "get_weather"},
             "threadId": "th", "turnId": "t1"}


async def run(outbox: ObservationOutbox, script: list[tuple[float, list[Emit]]]) -> None:
    task = asyncio.create_task(outbox.run())
    try:
        for pause, emits in script:
            await asyncio.sleep(pause)
            outbox.enqueue(emits)
        await asyncio.sleep(0.05)
        await outbox.sent()
    finally:
        task.cancel()


def batches_of(outbox: ObservationOutbox) -> list[list[str]]:
    """What each of the outbox's batches held, in order: records of one batch leave in one go,
    so "left together" is checked without timing the sends (a busy host may pause the process
    between two sends of one batch)."""
    seen: list[list[str]] = []
    take = outbox._next

    async def noted() -> list[dict[str, Any]]:
        batch = await take()
        seen.append([(r["native"] or {}).get("method") or (r["native"] or {}).get("type")
                     or "refusal" for r in batch])
        return batch

    outbox._next = noted  # type: ignore[method-assign]
    return seen


async def test_records_without_a_fact_wait_for_the_turn_end_and_leave_with_it() -> None:
    p = Producer()
    # a hold far longer than the script (the Turn's end comes ~20 ms in): a busy host pausing
    # this process between two lines must not send the first alone
    outbox = ObservationOutbox(p, "obs", hold_s=5.0)  # type: ignore[arg-type]
    batches = batches_of(outbox)
    await run(outbox, [(0, [codex("turn/started", turn={"id": "t1"})]),
                       (0.01, [codex("item/started", item={"type": "agentMessage"})]),
                       (0.01, [codex("turn/completed", **TURN_DONE)])])
    assert [m for _, m in p.sent] == ["turn/started", "item/started", "turn/completed"]
    assert batches == [["turn/started", "item/started", "turn/completed"]]  # one go


async def test_a_function_call_is_sent_at_once_with_what_waited_before_it() -> None:
    p = Producer()
    outbox = ObservationOutbox(p, "obs", hold_s=5.0)  # type: ignore[arg-type]
    batches = batches_of(outbox)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await run(outbox, [(0, [codex("turn/started", turn={"id": "t1"})]),
                       (0.02, [codex("item/started", **TOOL_ITEM)])])
    assert batches == [["turn/started", "item/started"]]
    assert all(t - t0 < 1.0 for t, _ in p.sent)  # long before the 5 s hold ran out


async def test_a_record_without_a_fact_waits_at_most_the_hold() -> None:
    p = Producer()
    outbox = ObservationOutbox(p, "obs", hold_s=0.3)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    task = asyncio.create_task(outbox.run())
    try:
        outbox.enqueue([codex("turn/started", turn={"id": "t1"})])
        await asyncio.sleep(0.01)
        assert p.sent == []  # waiting for what follows
        await asyncio.wait_for(outbox.sent(), 5)
        assert [m for _, m in p.sent] == ["turn/started"]
        assert 0.3 <= p.sent[0][0] - t0 < 2.0  # when the hold ran out, not never
    finally:
        task.cancel()


async def test_a_refusal_is_a_fact_and_without_a_hold_nothing_waits() -> None:
    refusal = Emit({"schema": "runtime.observation/1", "session_id": SID, "harness": "codex",
                    "turn_id": "turn_1", "native": None, "refusal": {"reason": "x"}})
    p = Producer()
    outbox = ObservationOutbox(p, "obs", hold_s=5.0)  # type: ignore[arg-type]
    batches = batches_of(outbox)
    t0 = asyncio.get_running_loop().time()
    await run(outbox, [(0, [codex("turn/started", turn={"id": "t1"}), refusal])])
    assert batches == [["turn/started", "refusal"]]
    assert p.sent[-1][0] - t0 < 1.0  # long before the 5 s hold ran out
    p = Producer()
    outbox = ObservationOutbox(p, "obs")  # type: ignore[arg-type]  # the simulated Runtime
    t0 = asyncio.get_running_loop().time()
    task = asyncio.create_task(outbox.run())
    try:
        outbox.enqueue([codex("turn/started", turn={"id": "t1"})])
        await asyncio.sleep(0.01)
        assert [m for _, m in p.sent] == ["turn/started"]
    finally:
        task.cancel()


async def test_records_are_stamped_when_taken_not_when_they_leave() -> None:
    p = Producer()
    outbox = ObservationOutbox(p, "obs", hold_s=0.05)  # type: ignore[arg-type]
    first = codex("turn/started", turn={"id": "t1"})
    await run(outbox, [(0, [first]), (0.04, [codex("turn/completed", **TURN_DONE)])])
    stamped = datetime.fromisoformat(first.record["observed_at"])
    # stamped on arrival, ~40 ms before it left with the Turn's end
    assert (p.wall[0] - stamped).total_seconds() >= 0.03


def claude(kind: str, **fields: Any) -> Emit:
    return Emit({"schema": "runtime.observation/1", "session_id": SID, "harness": "claude_code",
                 "turn_id": "turn_1", "native": {"type": kind, **fields}})


SCALE = 10  # the default hold's tests run ten times slower, the hold and its cap alike


def scaled_default_hold(monkeypatch: pytest.MonkeyPatch) -> float:
    """The live Runtimes' hold (``HOLD_S``) and cap (``HOLD_MAX_S``) times ``SCALE``, for a
    script whose gaps are scaled alike: what is checked is the harness's gaps against the
    default hold, and a busy host pausing this process for tens of milliseconds cannot decide
    it (the unscaled 13 ms gaps against a 50 ms hold could be)."""
    from runtimes import outbox as outbox_module

    monkeypatch.setattr(outbox_module, "HOLD_MAX_S", outbox_module.HOLD_MAX_S * SCALE)
    return outbox_module.HOLD_S * SCALE


async def test_the_default_hold_sends_a_short_claude_turn_as_one_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A Claude Code Turn on an instant model prints ``command_lifecycle`` at once,
    ``system/init`` ~13 ms later and its ``result`` at ~26–30 ms: with the live Runtimes' hold
    (``HOLD_S``) all of it leaves when the ``result`` arrives, one produce request, not one per
    pause (with the former 5 ms hold: three). Times scaled (``scaled_default_hold``)."""
    p = Producer()
    outbox = ObservationOutbox(p, "obs", hold_s=scaled_default_hold(monkeypatch))  # type: ignore[arg-type]
    batches = batches_of(outbox)
    await run(outbox, [(0, [claude("command_lifecycle", state="queued")]),
                       (0.013 * SCALE, [claude("system", subtype="init")]),
                       (0.013 * SCALE, [claude("user", isReplay=True), claude("assistant", message={
                           "content": [{"type": "text", "text": "ok"}]}),
                                claude("result", subtype="success")])])
    assert batches == [["command_lifecycle", "system", "user", "assistant", "result"]]


async def test_a_line_after_a_turns_end_waits_for_the_next_turn_not_alone_in_its_middle(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Claude Code prints ``command_lifecycle`` ``completed`` just after a Turn's ``result``.
    When the next Turn follows within the hold, that line leaves with the next Turn's records
    when its ``result`` arrives: the wait restarts with each record. (With a wait counted from
    the first record it left alone 50 ms after the ``result``, in the middle of the next Turn,
    a produce request and a fetch while the binary worked.) Times scaled
    (``scaled_default_hold``)."""
    p = Producer()
    outbox = ObservationOutbox(p, "obs", hold_s=scaled_default_hold(monkeypatch))  # type: ignore[arg-type]
    batches = batches_of(outbox)
    turn = [(0.030 * SCALE, [claude("command_lifecycle", state="queued")]),
            (0.013 * SCALE, [claude("system", subtype="init")]),
            (0.013 * SCALE, [claude("result", subtype="success")])]
    await run(outbox, [(0, [claude("command_lifecycle", state="completed")]), *turn])
    # one go, with the next Turn's result (~56 ms in)
    assert batches == [["command_lifecycle", "command_lifecycle", "system", "result"]]


async def test_records_that_keep_coming_wait_at_most_the_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A harness printing a line more often than the quiet gap, without a fact: the first record
    still leaves ``HOLD_MAX_S`` after it was taken, with those behind it — not when the harness
    stops. Times scaled up (gap 0.3 s, cap 0.6 s, a line every 0.1 s for 1.1 s) so a busy host's
    pauses cannot decide the outcome."""
    from runtimes import outbox as outbox_module

    monkeypatch.setattr(outbox_module, "HOLD_MAX_S", 0.6)
    p = Producer()
    outbox = ObservationOutbox(p, "obs", hold_s=0.3)  # type: ignore[arg-type]
    batches = batches_of(outbox)
    t0 = asyncio.get_running_loop().time()
    await run(outbox, [(0 if i == 0 else 0.1, [claude("system", subtype="status")])
                       for i in range(12)])
    first = p.sent[0][0] - t0
    assert 0.6 <= first < 1.05  # at the cap, before the last line (1.1 s) was printed
    assert len(batches) >= 2 and sum(map(len, batches)) == 12

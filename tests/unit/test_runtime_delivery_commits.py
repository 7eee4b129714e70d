"""When the Runtime's delivery loop commits its offsets (``runtimes/deliveries.py``):
never while a batch's Turn is starting — when the loop is idle (an empty poll), or once
``COMMIT_AFTER_S`` has passed with deliveries still arriving — and always after the observations
queued so far are published (at least once)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from runtimes.deliveries import COMMIT_AFTER_S, DeliveryLoop
from runtimes.harness import Emit
from runtimes.outbox import ObservationOutbox
from shared.domain.wire import message_delivery
from shared.kafka import encode

RT = "rt_" + "a" * 32
SID = "session_" + "b" * 32


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []


class FakeProducer:
    def __init__(self, log: Log) -> None:
        self.log = log

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[None]:
        self.log.events.append("send")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    async def flush(self) -> None:
        self.log.events.append("flush")


class FakeConsumer:
    def __init__(self, log: Log, fail: int = 0) -> None:
        self.log = log
        self.fail = fail

    def assignment(self) -> set[str]:
        return {"p0"}

    async def commit(self) -> None:
        if self.fail:
            self.fail -= 1
            raise ConnectionError("broker away")
        self.log.events.append("commit")


def batch(n: int = 1) -> dict[str, list[Any]]:
    recs = [SimpleNamespace(key=RT.encode(), value=encode(message_delivery(
        delivery_id=f"dlv_{i}", runtime_id=RT, session_id=SID, turn_id="turn_1", kind="start",
        messages=[{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}])))
        for i in range(n)]
    return {"p0": recs}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def make_loop(log: Log, clock: Clock, consumer: FakeConsumer | None = None
                    ) -> tuple[DeliveryLoop, asyncio.Task[None]]:
    outbox = ObservationOutbox(FakeProducer(log), "runtime.observations")  # type: ignore[arg-type]

    async def handle(d: Mapping[str, Any]) -> None:
        log.events.append("handled")
        # what the harness printed for it, queued behind the delivery
        outbox.enqueue([Emit({"session_id": SID, "delivery_id": d["delivery_id"]})])

    async def dead_letter(_r: Any, _p: Any) -> None:
        raise AssertionError("nothing here is poison")

    loop = DeliveryLoop(consumer or FakeConsumer(log), RT, handle, outbox,  # type: ignore[arg-type]
                        asyncio.Event(), dead_letter, clock=clock)
    return loop, asyncio.create_task(outbox.run())


async def test_a_batch_is_not_committed_while_its_turn_starts_but_once_the_loop_is_idle() -> None:
    log, clock = Log(), Clock()
    loop, publisher = await make_loop(log, clock)
    try:
        await loop.on_batch(batch(2))
        assert log.events == ["handled", "handled"]  # no commit on the batch's own pass
        assert loop.uncommitted_since == 100.0
        clock.now += 0.1
        await loop.on_batch({})  # the next poll came back empty: idle
        # both observations were handed to the producer and flushed before the commit
        assert log.events == ["handled", "handled", "send", "send", "flush", "commit"]
        assert loop.uncommitted_since is None
        await loop.on_batch({})
        assert log.events.count("commit") == 1  # nothing new read: nothing to commit
    finally:
        publisher.cancel()


async def test_with_deliveries_still_arriving_the_offsets_are_committed_after_the_window() -> None:
    log, clock = Log(), Clock()
    loop, publisher = await make_loop(log, clock)
    try:
        await loop.on_batch(batch())
        clock.now += COMMIT_AFTER_S / 2
        await loop.on_batch(batch())
        assert "commit" not in log.events
        clock.now += COMMIT_AFTER_S / 2
        await loop.on_batch(batch())
        assert log.events[-1] == "commit"
        assert loop.uncommitted_since is None
    finally:
        publisher.cancel()


async def test_a_failed_commit_is_tried_again_on_the_next_idle_poll() -> None:
    log, clock = Log(), Clock()
    loop, publisher = await make_loop(log, clock, FakeConsumer(log, fail=1))
    try:
        await loop.on_batch(batch())
        with pytest.raises(ConnectionError):
            await loop.on_batch({})
        assert loop.uncommitted_since is not None
        await loop.on_batch({})
        assert log.events[-1] == "commit"
        assert loop.uncommitted_since is None
    finally:
        publisher.cancel()



async def test_a_delivery_addressed_to_another_runtime_is_never_handed_to_the_harness() -> None:
    """Every Runtime reads the whole topic; the loop is the one place that keeps only this
    Runtime's deliveries (the live drivers rely on it)."""
    log, clock = Log(), Clock()
    loop, publisher = await make_loop(log, clock)
    other = SimpleNamespace(key=b"rt_other", value=encode(message_delivery(
        delivery_id="dlv_other", runtime_id="rt_" + "c" * 32, session_id=SID, turn_id="turn_1",
        kind="start", messages=[{"role": "user", "content": [{"type": "input_text",
                                                               "text": "hi"}]}])))
    try:
        assert await loop.handle_raw(other) == 0
        assert await loop.handle_raw(batch(1)["p0"][0]) == 1
        assert log.events == ["handled"]
    finally:
        publisher.cancel()

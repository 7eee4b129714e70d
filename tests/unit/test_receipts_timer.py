"""The receipt tracker's timer without a stack: only the one function under test runs (the
tracker's Kafka/store clients are created but never connect). A verdict batch whose
publication fails is not lost: the same verdicts go again (issue 18 item 3, durability of the
decision while the store or broker is away)."""

from __future__ import annotations

import asyncio
from typing import Any

from services.receipts.app import ReceiptService
from shared.domain.receipts import REASON_TIMEOUT, Expected, Publish, State
from shared.settings import Settings


def service() -> ReceiptService:
    s = Settings(**{"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "MONGODB_URI":
                    "mongodb://127.0.0.1:1/", "receipt_window_s": 10.0})
    return ReceiptService(s)


def expected(cid: str) -> Expected:
    return Expected(harness="claude_code", session_id="s1", call_id=cid, name="f",
                    success=True, content=())


def test_expire_due_pops_only_the_calls_past_their_deadline() -> None:
    svc = service()
    svc._track(expected("a"), 100.0)
    svc._track(expected("b"), 200.0)
    out = svc.expire_due(150.0)
    assert [k for k, _ in out] == [("s1", "a")]
    assert out[0][1].state is State.UNCERTAIN
    assert out[0][1].reason == REASON_TIMEOUT.format(window=10.0)
    assert svc.expire_due(150.0) == []  # popped once
    assert [k for k, _ in svc.expire_due(200.0)] == [("s1", "b")]


def test_a_failed_verdict_batch_is_published_again() -> None:
    svc = service()
    sent: list[list[tuple[Any, Publish]]] = []
    fail = [True]

    async def publish(verdicts: list[tuple[Any, Publish]]) -> None:
        if fail[0]:
            raise ConnectionError("store away")
        sent.append(verdicts)
        for key, _ in verdicts:
            svc._forget(key)

    svc.publish_verdicts = publish  # type: ignore[method-assign]
    svc._track(expected("a"), 100.0)

    async def scenario() -> None:
        assert await svc.fire_due(101.0) == 1
        assert sent == [] and ("s1", "a") in svc.calls  # kept, rescheduled
        fail[0] = False
        assert svc.expire_due(101.0) == []  # not before the retry delay
        assert await svc.fire_due(10_000_000_000.0) == 1

    asyncio.run(scenario())
    assert len(sent) == 1
    [(key, step)] = sent[0]
    assert key == ("s1", "a") and step.state is State.UNCERTAIN

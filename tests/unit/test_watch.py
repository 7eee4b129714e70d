"""``shared.watch.Watch``: admission's "is the store / broker there?" check before a hand-over —
one probe per ``fresh_s`` whatever the request rate, and the dependency's own exception (which
the HTTP layer maps to 503 ``unavailable``) while the last probe failed."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import KafkaConnectionError
from pymongo.errors import ConnectionFailure

from shared.watch import Watch


class Probe:
    def __init__(self) -> None:
        self.calls = 0
        self.answer = True

    async def __call__(self) -> bool:
        self.calls += 1
        return self.answer


async def test_one_probe_per_fresh_period_and_the_failure_raises() -> None:
    probe = Probe()
    w = Watch(probe, lambda: ConnectionFailure("store away"), fresh_s=0.2)
    for _ in range(50):
        await w.require()
    assert probe.calls == 1
    probe.answer = False
    await w.require()  # still the fresh answer: no probe yet
    assert probe.calls == 1
    await asyncio.sleep(0.25)
    with pytest.raises(ConnectionFailure, match="store away"):
        await w.require()
    assert probe.calls == 2
    probe.answer = True
    await asyncio.sleep(0.25)
    await w.require()  # back: requests go through again
    assert probe.calls == 3


async def test_the_broker_watch_raises_a_kafka_connection_error() -> None:
    probe = Probe()
    probe.answer = False
    w = Watch(probe, lambda: KafkaConnectionError("broker away"))
    with pytest.raises(KafkaConnectionError):
        await w.require()
    assert not await w.up()


async def test_a_failed_probe_within_the_grace_after_a_success_does_not_refuse() -> None:
    """A probe that was merely slow under load must not refuse good requests: only when no
    probe has succeeded for ``grace_s`` does ``require()`` raise."""
    probe = Probe()
    w = Watch(probe, lambda: KafkaConnectionError("broker away"), fresh_s=0.05, grace_s=0.4)
    await w.require()  # a success
    probe.answer = False
    await asyncio.sleep(0.1)
    await w.require()  # failed, but within the grace
    assert probe.calls == 2
    await asyncio.sleep(0.4)
    with pytest.raises(KafkaConnectionError):
        await w.require()  # failing for longer than the grace
    never = Watch(Probe(), lambda: KafkaConnectionError("x"), grace_s=10.0)
    never.probe.answer = False  # type: ignore[attr-defined]
    with pytest.raises(KafkaConnectionError):
        await never.require()  # no success ever: no grace


async def test_a_readiness_check_that_fails_refuses_the_next_request_at_once() -> None:
    """/readyz probing the store gone must also stop the next hand-over: without it a write
    right after /readyz turned 503 went on a good probe up to ``fresh_s`` old and answered 504
    after the storage budget instead of 503 at once."""
    probe = Probe()
    w = Watch(probe, lambda: ConnectionFailure("store away"), fresh_s=60.0)
    await w.require()  # a good probe, fresh for a minute
    probe.answer = False
    assert await w.check() is False
    with pytest.raises(ConnectionFailure):
        await w.require()
    assert probe.calls == 2  # require went by the check, no third probe


async def test_concurrent_requests_share_one_probe() -> None:
    """One probe per ``fresh_s`` whatever the request rate: 50 requests that all find the last
    probe old wait for one probe together (each probing sent 50 broker/store probes at once
    every second under load)."""
    probe = Probe()

    async def slow() -> bool:
        await asyncio.sleep(0.05)
        return await probe()

    w = Watch(slow, lambda: ConnectionFailure("store away"), fresh_s=60.0)
    await asyncio.gather(*(w.require() for _ in range(50)))
    assert probe.calls == 1
    probe.answer = False
    w._checked = -1e9  # the last probe is old again
    results = await asyncio.gather(*(w.require() for _ in range(50)), return_exceptions=True)
    assert probe.calls == 2
    assert all(isinstance(r, ConnectionFailure) for r in results)

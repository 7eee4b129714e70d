"""``shared.kafka.stop_consumer``: aiokafka's ``stop()`` can let out the cancellation of a fetch
its fetcher cancelled (aio-libs/aiokafka#647; seen in CI at a test run's end); that one is
dropped and the connections still closed, while a cancellation of the caller propagates."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from aiokafka import AIOKafkaConsumer

from shared.kafka import stop_consumer


class _Client:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


class _Consumer:
    """What matters of ``AIOKafkaConsumer.stop``: it raises what its fetcher's close let out,
    before closing its client."""

    def __init__(self, stop: Any) -> None:
        self._client = _Client()
        self._stop = stop

    async def stop(self) -> None:
        await self._stop()
        await self._client.close()


async def test_a_cancellation_let_out_by_the_fetcher_is_dropped_and_the_client_closed() -> None:
    async def fetcher_lets_out_its_cancellation() -> None:
        raise asyncio.CancelledError

    consumer = _Consumer(fetcher_lets_out_its_cancellation)
    await stop_consumer(cast(AIOKafkaConsumer, consumer))  # without the helper: CancelledError
    assert consumer._client.closed


async def test_a_clean_stop_is_left_alone() -> None:
    async def fine() -> None:
        return None

    consumer = _Consumer(fine)
    await stop_consumer(cast(AIOKafkaConsumer, consumer))
    assert consumer._client.closed


async def test_the_callers_own_cancellation_still_propagates() -> None:
    entered = asyncio.Event()

    async def slow() -> None:
        entered.set()
        await asyncio.Event().wait()

    consumer = _Consumer(slow)
    task = asyncio.create_task(stop_consumer(cast(AIOKafkaConsumer, consumer)))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not consumer._client.closed

"""A service moves what start-up built out of the collector's reach before it serves
(shared.service.settle_heap): a full collection stops the event loop for as long as it walks
every tracked object (docs/benchmarks.md, "Collector pauses")."""

from __future__ import annotations

import asyncio
import gc
import os
import signal

import pytest

from shared import service


def test_settle_heap_freezes_what_is_alive() -> None:
    kept = [object() for _ in range(1000)]
    try:
        service.settle_heap()
        assert gc.get_freeze_count() >= len(kept)
    finally:
        gc.unfreeze()


async def test_a_service_settles_its_heap_after_start_up_before_it_serves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    steps: list[str] = []
    monkeypatch.setattr(service, "settle_heap", lambda: steps.append("settled"))

    async def start() -> None:
        steps.append("started")
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)

    async def stop() -> None:
        steps.append("stopped")

    await service.run_until_stopped(start, stop)
    assert steps == ["started", "settled", "stopped"]


async def test_ready_is_called_once_started_and_settled() -> None:
    """``ready`` (the bench's product prints READY with it) comes after start-up and the settled
    heap, before the service serves until its stop."""
    steps: list[str] = []

    async def start() -> None:
        steps.append("started")
        asyncio.get_running_loop().call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)

    async def stop() -> None:
        steps.append("stopped")

    freeze_before = gc.get_freeze_count()
    await service.run_until_stopped(start, stop, ready=lambda: steps.append(
        f"ready, frozen {gc.get_freeze_count() >= freeze_before}"))
    gc.unfreeze()
    assert steps == ["started", "ready, frozen True", "stopped"]

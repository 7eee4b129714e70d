"""A service moves what start-up built out of the collector's reach before it serves
(shared.service.settle_heap): a full collection stops the event loop for as long as it walks
every tracked object (docs/benchmarks.md, "Collector pauses")."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
from collections import OrderedDict
from types import SimpleNamespace

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


def _untracked_after_a_collection(values: list[object]) -> bool:
    gc.collect()  # tuples of untracked items are untracked by the collection that meets them
    return not any(gc.is_tracked(v) for v in values)


def test_storage_holds_its_sessions_out_of_the_collectors_reach() -> None:
    """Storage's Session memory grows with the Sessions it owns (100 000 held): each one held
    as an object would be walked by every full collection — ~60-180 ms of stopped event loop
    every few seconds at 100 000 (docs/benchmarks.md, "Collector pauses")."""
    from services.storage.decided import DecidedState
    from services.storage.domain.sessions import SessionState

    d = DecidedState(batch_max=10)
    states = {f"session_{i}": SessionState(
        session_id=f"session_{i}", harness="codex", placement="none", created_at="t",
        version=3, last_sequence=i, binding={"runtime_id": "rt", "caps": {"images": True}},
        metadata={"k": "v"}, open_calls={"call_1": "shell"}) for i in range(100)}
    d.decided(["k"], states)
    assert _untracked_after_a_collection(list(d.sessions.values()))
    assert d.session("session_7") == states["session_7"]  # what was decided, whole


async def test_admission_holds_its_profiles_out_of_the_collectors_reach() -> None:
    from services.admission.core import Admission, Profile

    class Sessions:  # the one store read admission makes of a Session it has not seen
        async def find_one(self, flt: dict[str, str], _projection: object) -> dict[str, str]:
            return {"_id": flt["_id"], "harness": "codex", "placement": "none", "tenant": "t1"}

    adm = object.__new__(Admission)  # only its profile memory and its store are used here
    adm.db = SimpleNamespace(sessions=Sessions())  # type: ignore[assignment]
    adm.profiles = OrderedDict()
    first = [await adm._session_profile(f"session_{i}") for i in range(100)]
    assert _untracked_after_a_collection(list(adm.profiles.values()))
    again = await adm._session_profile("session_3")
    assert again == first[3] == Profile("codex", "none", "t1")

"""A Codex live driver with one Session's process wired in and no binary behind it, for unit
tests of how it maps native records and RPC answers (its emitted records are collected)."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from cachetools import FIFOCache

from runtimes.codex.live import CodexLive, _Proc, _Turn
from runtimes.live import LiveOptions


def driver_with_session(tmp_path: Path, thread_id: str, native_turn: str
                        ) -> tuple[CodexLive, _Proc, list[dict[str, Any]]]:
    """``CodexLive`` holding ``session_a`` on ``thread_id`` with Core Turn ``turn_1`` running as
    ``native_turn``; the list receives every record it emits."""
    h = CodexLive(LiveOptions(runtime_id="rt_1", harness="codex",
                              model_base_url="http://127.0.0.1:9", binary="/bin/false",
                              work_dir=tmp_path))
    out: list[dict[str, Any]] = []
    h._emit = lambda emits: out.extend(e.record for e in emits)
    # the process shares the driver's per-Session record of ended Turns, as ``CodexLive._proc``
    # makes it; a driver without one (the code before that fix, when a test is checked against
    # it) gives each process its own, as it did
    shared = getattr(h, "_ended", None)
    ended = (shared.setdefault("session_a", FIFOCache(1000)) if shared is not None
             else FIFOCache(1000))
    proc = _Proc("session_a", types.SimpleNamespace(returncode=None), tmp_path,  # type: ignore[arg-type]
                 thread_id=thread_id, ended=ended)
    proc.turn = _Turn("turn_1", native_turn)
    h.sessions["session_a"] = proc
    return h, proc, out

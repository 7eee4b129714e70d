"""Records of another thread than the Session's own (issue 57 item 9).

Primary spec, "Function results": Codex confirms with the **live root** dynamic-tool
``item/completed``. ``codex app-server`` 0.169 prints the records of every thread of its
process on the one stdout: with sub-agents on, a helper spawned by the root agent runs in a
thread of its own, and its ``thread/started``, ``turn/started``, ``item/*`` and ``turn/completed``
arrive beside the root thread's (golden ``tests/data/native/codex/subagent.jsonl``, recorded by
``python -m tests.golden.record_codex subagent`` with sub-agents on: the root agent spawns a
helper whose model calls the Session's function ``get_weather``).

What the golden shows: the helper is not given the Session's dynamic tools, and Codex answers
its call itself ("unsupported call: get_weather", in the helper's next model request), so no
dynamic-tool call of a sub-thread is ever printed — no ``item/started`` ``dynamicToolCall``, no
``item/tool/call``. The Runtime runs Codex with sub-agents off anyway
(``runtimes/codex/config.py``). And should a sub-thread's record reach the Runtime, it
is not the Session's: the Runtime forwards only the records of the Session's own thread, so a
helper's ``turn/started`` cannot be taken for the Turn's and its ``turn/completed`` cannot end
Core's Turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runtimes.codex.config import config_toml
from shared.domain.observations import CallOpened, classify_all
from tests.support.codex_live import driver_with_session

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "native" / "codex" / "subagent.jsonl"


def records() -> list[dict[str, Any]]:
    return [json.loads(x) for x in GOLDEN.read_text().splitlines() if x]


def thread_of(m: dict[str, Any]) -> str | None:
    p = m.get("params") or {}
    t = p.get("threadId")
    if t is None and isinstance(p.get("thread"), dict):
        t = p["thread"].get("id")
    return t if isinstance(t, str) else None


def root_and_helper() -> tuple[str, str, str]:
    """(root thread, the root Turn's native id, the helper's thread) from the spawn record."""
    spawn = next(m for m in records() if m.get("method") == "item/completed"
                 and m["params"]["item"]["type"] == "collabAgentToolCall")
    root = spawn["params"]["threadId"]
    [helper] = spawn["params"]["item"]["receiverThreadIds"]
    return root, spawn["params"]["turnId"], helper


def test_the_helper_thread_prints_its_own_turn_but_no_dynamic_tool_call() -> None:
    root, _turn, helper = root_and_helper()
    recs = records()
    helper_methods = {m.get("method") for m in recs if thread_of(m) == helper}
    assert {"turn/started", "item/started", "item/completed"} <= helper_methods
    assert not [m for m in recs if m.get("method") == "item/tool/call"]
    assert not [m for m in recs if m.get("method") in ("item/started", "item/completed")
                and m["params"]["item"]["type"] == "dynamicToolCall"]
    assert not [f for m in recs for f in classify_all("codex", m) if isinstance(f, CallOpened)]
    assert root != helper


def test_the_runtime_forwards_only_the_sessions_own_thread(tmp_path: Path) -> None:
    root, native_turn, helper = root_and_helper()
    h, proc, out = driver_with_session(tmp_path, root, native_turn)
    proc.turns[native_turn] = "turn_1"
    written: list[dict[str, Any]] = []
    h._write = lambda _p, message: written.append(message)  # type: ignore[method-assign]
    for m in records():
        h._dispatch(proc, m)
    forwarded = [r["native"] for r in out]
    assert forwarded, "the root thread's records are forwarded"
    assert {thread_of(n) for n in forwarded} == {root}
    # the helper's Turn is not taken for the Session's: no Core Turn id for it
    helper_turns = {m["params"]["turn"]["id"] for m in records()
                    if m.get("method") == "turn/started" and thread_of(m) == helper}
    assert helper_turns and not helper_turns & set(proc.turns)
    assert [r["turn_id"] for r in out if r["native"].get("method") == "turn/completed"] == [
        "turn_1"]


def test_the_runtime_runs_codex_with_sub_agents_off() -> None:
    toml = config_toml("http://127.0.0.1:9/v1", "m", "K")
    assert "multi_agent = false" in toml and "[agents]\nenabled = false" in toml

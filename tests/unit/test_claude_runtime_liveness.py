"""The Claude Runtime reads liveness with Core's classifier (issue 57 item 6).

Primary spec, "Function results": "Replayed, synthetic and Subagent records do not confirm it."
Core's rule (``shared.domain.harnesses.claude_code.is_live_root``, docs/runtime-boundary.md): a
record is live only when ``isReplay`` and ``isSynthetic`` are absent or exactly JSON ``false``.
The live Claude Runtime must read the same records the same way: a ``tool_result`` that Core
does not count as live must not release a call (the Runtime would then refuse Core's result for
it), and a ``tool_use`` that Core does not count as a live root call must not become a call the
Runtime accepts a result for. Same table as ``tests/unit/test_claude_liveness.py``."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest

from runtimes.claude.bridge import mcp_content
from runtimes.claude.state import Session
from shared.domain.harnesses import claude_code as claude
from shared.domain.observations import CallOpened, classify_all
from tests.unit.test_claude_liveness import ABSENT, FLAG_IDS, FLAG_TABLE
from tests.unit.test_real_claude_records import (
    CALL,
    call_record,
    live,
    rejected_record,
    session,
    turn,
)


def with_flag(rec: dict[str, Any], key: str, value: object) -> dict[str, Any]:
    out = copy.deepcopy(rec)
    out.pop(key, None)
    if value is not ABSENT:
        out[key] = value
    return out


def result_delivery() -> dict[str, Any]:
    return {"delivery_id": "dlv_2", "session_id": "session_a", "turn_id": "turn_1",
            "kind": "function_result", "call_id": CALL, "success": True,
            "content": [{"type": "input_text", "text": "ok"}]}


@pytest.mark.parametrize("key", ["isReplay", "isSynthetic"])
@pytest.mark.parametrize(("value", "is_live"), FLAG_TABLE, ids=FLAG_IDS)
def test_only_a_live_tool_result_releases_the_call(tmp_path: Path, key: str, value: object,
                                                   is_live: bool) -> None:
    h, out = live(tmp_path)
    s = session(tmp_path, turn())
    h._on_record(s, call_record())
    record = with_flag(rejected_record(), key, value)
    assert claude.is_live_root(record) is is_live  # Core's reading
    h._on_record(s, record)
    released = [r["native"] for r in out if (r["native"] or {}).get("type") == "tool_release"]
    assert bool(released) is is_live, (key, value, released)
    assert (CALL in s.answered) is is_live


@pytest.mark.parametrize("key", ["isReplay", "isSynthetic"])
@pytest.mark.parametrize(("value", "is_live"), FLAG_TABLE, ids=FLAG_IDS)
def test_only_a_live_root_tool_use_is_a_call_the_runtime_takes_a_result_for(
        tmp_path: Path, key: str, value: object, is_live: bool) -> None:
    h, out = live(tmp_path)
    s = session(tmp_path, turn())
    record = with_flag(call_record(), key, value)
    opened = [f for f in classify_all("claude_code", record) if isinstance(f, CallOpened)]
    assert bool(opened) is is_live  # Core opens the call only from a live root record
    h._on_record(s, record)
    assert (CALL in s.root_calls) is is_live
    asyncio.run(h._function_result(s, result_delivery()))
    refused = [r for r in out if r.get("refusal")]
    assert bool(refused) is not is_live, refused


def test_a_subagent_tool_use_is_no_root_call(tmp_path: Path) -> None:
    s = Session("session_a", tmp_path)
    s.note({**call_record(), "parent_tool_use_id": "toolu_parent"})
    assert CALL not in s.root_calls and CALL in s.sub_calls


def test_the_runtime_answers_a_failed_result_with_one_block_per_delivered_part() -> None:
    """What the record cannot show (a failed result's block count, tests/unit/
    test_claude_goldens.py), the Runtime keeps: its MCP answer is the delivered parts, one text
    block each, in order — two parts stay two blocks, one part with a newline stays one."""
    two = [{"type": "input_text", "text": "partial: none"},
           {"type": "input_text", "text": "no such city"}]
    one = [{"type": "input_text", "text": "partial: none\nno such city"}]
    assert mcp_content(two, None) == [{"type": "text", "text": "partial: none"},
                                      {"type": "text", "text": "no such city"}]
    assert mcp_content(one, None) == [{"type": "text", "text": "partial: none\nno such city"}]

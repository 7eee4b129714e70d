"""Which Claude Code records are live root records (primary spec, "Function results": "Replayed,
synthetic and Subagent records do not confirm it").

One classifier (``shared.domain.harnesses.claude_code.is_live_root``) decides for the adapter's
``tool_uses()``, storage's observation classifier (``shared.domain.observations``) and the
receipt matcher (``shared.domain.receipts``). Decision (docs/runtime-boundary.md): ``isReplay``
and ``isSynthetic`` are live only when the field is absent or exactly JSON ``false``; every other
value — ``true``, ``0``, ``0.0``, ``""``, ``null``, ``"false"``, ``[]`` — is not live. In Python
``0 == False`` and ``0 in (None, False)`` are true, so the check is by identity with ``False``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.storage.handler import record_to_inputs
from shared import records
from shared.domain.harnesses import claude_code as claude
from shared.domain.observations import CallOpened, classify_all
from shared.domain.receipts import Confirmed, NotAMatch, expect, match_native

ABSENT = object()

# (flag value, live?) — ABSENT means the key is not in the record
FLAG_TABLE: list[tuple[object, bool]] = [
    (ABSENT, True),
    (False, True),
    (True, False),
    (0, False),
    (0.0, False),
    (-0.0, False),
    (1, False),
    ("", False),
    ("false", False),
    (None, False),
    ([], False),
    ({}, False),
]
FLAG_IDS = [repr(v) if v is not ABSENT else "absent" for v, _ in FLAG_TABLE]


def with_flag(rec: dict[str, Any], key: str, value: object) -> dict[str, Any]:
    out = copy.deepcopy(rec)
    out.pop(key, None)
    if value is not ABSENT:
        out[key] = value
    return out


def assistant() -> dict[str, Any]:
    return {
        "type": "assistant",
        "uuid": "u-a",
        "session_id": "ns_1",
        "parent_tool_use_id": None,
        "message": {"content": [
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": 1}},
        ]},
    }


def tool_result() -> dict[str, Any]:
    return {
        "type": "user",
        "uuid": "u-r",
        "session_id": "ns_1",
        "parent_tool_use_id": None,
        "message": {"role": "user", "content": [{
            "type": "tool_result", "tool_use_id": "toolu_1", "is_error": False,
            "content": [{"type": "text", "text": "sunny"}],
        }]},
    }


EXPECTED = expect(
    harness="claude_code",
    session_id="session_" + "1" * 32,
    call_id="toolu_1",
    name="lookup",
    success=True,
    content=[{"type": "input_text", "text": "sunny"}],
    native_session_id="ns_1",
)


@pytest.mark.parametrize("key", ["isReplay", "isSynthetic"])
@pytest.mark.parametrize(("value", "live"), FLAG_TABLE, ids=FLAG_IDS)
def test_live_only_when_absent_or_exactly_false(key: str, value: object, live: bool) -> None:
    assert claude.is_live_root(with_flag(assistant(), key, value)) is live
    assert claude.is_live_root(with_flag(tool_result(), key, value)) is live


@pytest.mark.parametrize("key", ["isReplay", "isSynthetic"])
@pytest.mark.parametrize(("value", "live"), FLAG_TABLE, ids=FLAG_IDS)
def test_adapter_and_storage_open_calls_only_from_live_records(
    key: str, value: object, live: bool
) -> None:
    rec = with_flag(assistant(), key, value)
    want_adapter = [claude.ClaudeCall("ns_1", "toolu_1", "lookup", {"q": 1})] if live else []
    opened = CallOpened("toolu_1", "lookup", {"q": 1}, {"session_id": "ns_1"})
    want_storage = [opened] if live else []
    assert claude.tool_uses(rec) == want_adapter
    assert classify_all("claude_code", rec) == want_storage


@pytest.mark.parametrize("key", ["isReplay", "isSynthetic"])
@pytest.mark.parametrize(("value", "live"), FLAG_TABLE, ids=FLAG_IDS)
def test_receipts_confirm_only_live_records(key: str, value: object, live: bool) -> None:
    verdict = match_native(EXPECTED, with_flag(tool_result(), key, value))
    if live:
        assert isinstance(verdict, Confirmed), verdict
    else:
        assert isinstance(verdict, NotAMatch) and verdict.field == key, verdict


@pytest.mark.parametrize(("parent", "live"), [
    (ABSENT, True), (None, True), ("toolu_0", False), ("", False), (0, False), (False, False),
])
def test_root_only_when_parent_is_null_or_absent(parent: object, live: bool) -> None:
    rec = with_flag(assistant(), "parent_tool_use_id", parent)
    assert claude.is_live_root(rec) is live
    assert (classify_all("claude_code", rec) != []) is live
    assert (claude.tool_uses(rec) != []) is live


@pytest.mark.parametrize("key", ["isReplay", "isSynthetic"])
@pytest.mark.parametrize("value", [True, 0, None])
def test_a_replayed_tool_use_gives_storage_no_function_call_fact(key: str, value: object) -> None:
    """Storage's input from an observation: the live record opens the call once; a replayed or
    synthetic copy of the same ``tool_use`` (after the call was answered) is no fact at all, so
    it can neither re-open the call nor add a second ``function_call`` Item."""
    sid = "session_" + "2" * 32

    def observation(native: dict[str, Any]) -> dict[str, Any]:
        return {"schema": records.OBSERVATION, "runtime_id": "rt_" + "3" * 32,
                "session_id": sid, "harness": "claude_code", "native": native,
                "observed_at": "2026-11-30T10:00:00Z"}

    live = record_to_inputs(observation(assistant()))
    # the live record: its text is an agent message, its tool_use the call
    assert [(f["kind"], f.get("call_id")) for f in live] == [("agent_message", None),
                                                             ("function_call", "toolu_1")]
    assert record_to_inputs(observation(with_flag(assistant(), key, value))) == []

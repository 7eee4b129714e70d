"""Claude Code native encoding and the per-Turn bound (shared/domain/harnesses/claude_code.py)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

import pytest

from shared.domain.harnesses import adapter_for, is_terminal
from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses.claude_code import MAX_USER_MESSAGES_PER_TURN, ClaudeTurn
from shared.domain.harnesses.errors import (
    AdapterError,
    TurnBoundExceeded,
    TurnEnded,
    UnsupportedContent,
)
from tests.support.builders import Json
from tests.support.builders import image as i
from tests.support.builders import msg as user_msg
from tests.support.builders import text as t

PNG = "data:image/png;base64,iVBORw0KGgo="
JPG = "data:image/jpeg;base64,/9j/4AAQ"


def msg(*parts: Json) -> Json:
    """A message with ``"type": "message"``, as the Responses API writes it."""
    return user_msg(*parts, type="message")


def batch(n: int) -> list[dict[str, Any]]:
    return [msg(t(f"m{k}")) for k in range(n)]


class CountingUUIDs:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        return f"00000000-0000-4000-8000-{self.calls:012d}"


def test_native_user_messages_exact_shape() -> None:
    ids = CountingUUIDs()
    messages = [msg(t("look"), i(PNG)), msg(i(JPG))]
    before = copy.deepcopy(messages)
    got = claude.encode_messages(messages, native_session_id="ns_1", uuid_factory=ids)
    assert got == [
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": "iVBORw0KGgo=",
                        },
                    },
                ],
            },
            "parent_tool_use_id": None,
            "session_id": "ns_1",
            "uuid": "00000000-0000-4000-8000-000000000001",
        },
        {
            "type": "user",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/jpeg",
                            "data": "/9j/4AAQ",
                        },
                    },
                ],
            },
            "parent_tool_use_id": None,
            "session_id": "ns_1",
            "uuid": "00000000-0000-4000-8000-000000000002",
        },
    ]
    assert messages == before


def test_uuid_unique_per_native_message() -> None:
    turn = ClaudeTurn()
    seen: list[str] = []
    opened = turn.open("b0", batch(3))
    assert isinstance(opened, list)
    seen += [m["uuid"] for m in opened]
    for k in range(1, 20):
        got = turn.steer(f"b{k}", batch(3))
        assert isinstance(got, list)
        seen += [m["uuid"] for m in got]
    assert len(seen) == 60 == len(set(seen))
    for u in seen:
        assert uuid.UUID(u).version == 4
    # and across separate encodings with the default factory
    many = [m["uuid"] for _ in range(50) for m in claude.encode_messages(batch(2))]  # type: ignore[union-attr]
    assert len(set(many)) == 100


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        (PNG, True),
        (JPG, True),
        ("data:image/gif;base64,R0lGOD", False),
        ("https://example.com/a.png", False),
        ("data:image/png,rawbytes", False),
    ],
)
def test_image_blocks_only_inline_png_jpeg(url: str, ok: bool) -> None:
    got = claude.encode_messages([msg(t("x"), i(url))])
    if ok:
        assert isinstance(got, list)
    else:
        assert isinstance(got, UnsupportedContent)
        assert got.param == "messages[0].content[1]"
        assert is_terminal(got)


# ---------------------------------------------------------------------------- the 64 bound


def turn_at(n: int, ids: CountingUUIDs | None = None) -> ClaudeTurn:
    """A running Turn holding ``n`` native user messages: the opening prompt then single steers."""
    turn = ClaudeTurn(uuid_factory=ids or CountingUUIDs())
    assert isinstance(turn.open("open", batch(1)), list)
    for k in range(n - 1):
        assert isinstance(turn.steer(f"s{k}", batch(1)), list)
    assert turn.user_messages == n
    return turn


# (count before, steering batch size, accepted?)
BOUND = [
    (62, 1, True),  # → 63
    (63, 1, True),  # → 64: the last one allowed
    (64, 1, False),  # → 65
    (63, 2, False),  # → 65: the whole batch is refused, not one of two
    (62, 2, True),  # → 64
    (1, 63, True),  # opening prompt + 63 = 64
    (1, 64, False),  # opening prompt + 64 = 65
]


@pytest.mark.parametrize(("before", "size", "accepted"), BOUND)
def test_bound_including_opening_prompt(before: int, size: int, accepted: bool) -> None:
    ids = CountingUUIDs()
    turn = turn_at(before, ids)
    submitted_before = list(turn.submitted)
    uuids_before = ids.calls
    got = turn.steer("batch", batch(size))
    if accepted:
        assert isinstance(got, list) and len(got) == size
        assert turn.user_messages == before + size <= MAX_USER_MESSAGES_PER_TURN
        assert turn.submitted == submitted_before + got
        assert turn.running
    else:
        assert isinstance(got, TurnBoundExceeded)
        assert is_terminal(got)
        # nothing of the rejected batch was encoded, counted or recorded
        assert ids.calls == uuids_before
        assert turn.submitted == submitted_before
        assert turn.user_messages == before
        # and the running Turn ended
        assert not turn.running
        assert turn.ended == got
        after = turn.steer("later", batch(1))
        assert isinstance(after, TurnEnded)
        assert turn.submitted == submitted_before


def test_bound_walk_63_64_65() -> None:
    turn = turn_at(63)
    assert isinstance(turn.steer("s64", batch(1)), list)
    assert turn.user_messages == 64
    rejected = turn.steer("s65", batch(1))
    assert isinstance(rejected, TurnBoundExceeded)
    assert "65" in rejected.message and "64" in rejected.message
    assert len(turn.submitted) == 64


@pytest.mark.parametrize(("size", "accepted"), [(63, True), (64, True), (65, False)])
def test_opening_prompt_alone(size: int, accepted: bool) -> None:
    turn = ClaudeTurn()
    got = turn.open("open", batch(size))
    assert isinstance(got, list) is accepted
    assert len(turn.submitted) == (size if accepted else 0)


def test_bound_is_configurable() -> None:
    turn = ClaudeTurn(max_user_messages=2)
    assert isinstance(turn.open("o", batch(1)), list)
    assert isinstance(turn.steer("s", batch(2)), TurnBoundExceeded)


def test_content_error_records_nothing_and_keeps_turn() -> None:
    turn = turn_at(3)
    got = turn.steer("bad", [msg(t("ok")), msg(i("https://example.com/x.png"))])
    assert isinstance(got, UnsupportedContent)
    assert turn.user_messages == 3 and len(turn.submitted) == 3 and turn.running


def test_open_twice_refused() -> None:
    turn = turn_at(1)
    assert isinstance(turn.open("again", batch(1)), TurnEnded)


def test_finish_ends_turn() -> None:
    turn = turn_at(2)
    turn.finish("result: success")
    assert isinstance(turn.steer("s", batch(1)), TurnEnded)


# ---------------------------------------------------------------------------- consumption


def test_public_input_applied_only_after_every_message_consumed() -> None:
    turn = ClaudeTurn()
    opened = turn.open("open", batch(1))
    steer = turn.steer("steer", batch(3))
    assert isinstance(opened, list) and isinstance(steer, list)
    assert turn.consumed(opened[0]["uuid"]) == "open"
    assert turn.is_applied("open")
    assert turn.consumed(steer[0]["uuid"]) is None
    assert turn.consumed(steer[2]["uuid"]) is None
    assert not turn.is_applied("steer")
    assert turn.consumed(steer[2]["uuid"]) is None  # a repeat changes nothing
    assert turn.consumed("not-a-uuid") is None
    assert not turn.is_applied("steer")
    assert turn.consumed(steer[1]["uuid"]) == "steer"
    assert turn.is_applied("steer")
    assert turn.consumed(steer[1]["uuid"]) is None  # applied once


def test_same_batch_id_twice_refused() -> None:
    turn = turn_at(1)
    assert isinstance(turn.steer("x", batch(1)), list)
    again = turn.steer("x", batch(1))
    assert isinstance(again, AdapterError) and again.code == "invalid_batch"
    assert turn.user_messages == 2


def test_empty_batch_refused() -> None:
    turn = turn_at(1)
    empty = turn.steer("e", [])
    assert isinstance(empty, AdapterError) and empty.code == "invalid_batch"


# ---------------------------------------------------------------------------- function results


def test_tool_result_block() -> None:
    got = claude.tool_result_block("toolu_1", True, [t("a"), i(PNG), t("")])
    assert got == {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "is_error": False,
        "content": [
            {"type": "text", "text": "a"},
            {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="},
            },
            {"type": "text", "text": ""},
        ],
    }
    failed = claude.tool_result_block("toolu_1", False, [t("out"), t("boom")])
    assert isinstance(failed, dict) and failed["is_error"] is True
    assert failed["content"] == [{"type": "text", "text": "out"}, {"type": "text", "text": "boom"}]


def test_tool_result_image_in_failed_result_refused() -> None:
    got = claude.tool_result_block("toolu_1", False, [i(PNG), t("boom")])
    assert isinstance(got, UnsupportedContent) and is_terminal(got)


def test_tool_result_message_wraps_with_uuid() -> None:
    a = claude.tool_result_message("toolu_1", True, [t("x")], native_session_id="ns")
    b = claude.tool_result_message("toolu_1", True, [t("x")], native_session_id="ns")
    assert isinstance(a, dict) and isinstance(b, dict)
    assert a["type"] == "user" and a["session_id"] == "ns" and a["parent_tool_use_id"] is None
    assert a["message"]["content"][0]["tool_use_id"] == "toolu_1"
    assert a["uuid"] != b["uuid"]


def test_tool_uses() -> None:
    rec = {
        "type": "assistant",
        "uuid": "u",
        "session_id": "ns",
        "parent_tool_use_id": None,
        "message": {
            "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "fetch", "input": {}},
            ]
        },
    }
    assert claude.tool_uses(rec) == [
        claude.ClaudeCall("ns", "toolu_1", "lookup", {"q": 1}),
        claude.ClaudeCall("ns", "toolu_2", "fetch", {}),
    ]
    assert claude.tool_uses({**rec, "parent_tool_use_id": "toolu_0"}) == []  # Subagent
    assert claude.tool_uses({**rec, "isReplay": True}) == []
    assert claude.tool_uses({**rec, "type": "user"}) == []


def test_registry_claude() -> None:
    a = adapter_for("claude_code")
    got = a.encode_messages(batch(2))
    assert isinstance(got, list) and len(got) == 2
    assert len({m["uuid"] for m in got}) == 2
    res = a.encode_function_result("toolu_1", True, [t("ok")])
    assert isinstance(res, dict)
    assert res["message"]["content"][0]["type"] == "tool_result"

"""The reference Runtime's simulated harness (runtimes/harness.py): deliveries in,
native observations out — checked with the receipt tracker's own matching rules."""

from __future__ import annotations

from typing import Any

import pytest

from runtimes.harness import ALTERED_SUFFIX, Emit, SimulatedHarness, parse_calls
from runtimes.switches import Switches
from shared.domain import receipts
from shared.domain.harnesses import codex
from shared.domain.observations import CallOpened, TurnEnded, classify
from shared.domain.wire import (
    REFUSAL_TURN_BOUND_EXCEEDED,
    function_result_delivery,
    message_delivery,
)
from tests.support.builders import image as i
from tests.support.builders import msg
from tests.support.builders import text as t

RT = "rt_" + "a" * 32
SID = "session_" + "b" * 32
PNG = "data:image/png;base64,iVBORw0KGgo="
JPG = "data:image/jpeg;base64,/9j/4AAQ"


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"{self.n:032x}"


def make(harness: str = "claude_code", **kw: Any) -> SimulatedHarness:
    return SimulatedHarness(runtime_id=RT, harness=harness, new_hex=Counter(), **kw)


_dlv = Counter()


def start(h: SimulatedHarness, *messages: dict[str, Any], turn: str = "turn_1",
          kind: str = "start", now: float = 0.0, sid: str = SID) -> list[Emit]:
    return h.handle(message_delivery(
        delivery_id=f"dlv_{_dlv()}", runtime_id=RT, session_id=sid, turn_id=turn,
        kind=kind, messages=list(messages),  # type: ignore[arg-type]
    ), now)


def natives(out: list[Emit]) -> list[Any]:
    return [e.record["native"] for e in out]


def opened_call(h: SimulatedHarness, out: list[Emit]) -> CallOpened:
    calls = [c for c in (classify(h.harness, n) for n in natives(out))
             if isinstance(c, CallOpened)]
    assert len(calls) == 1
    return calls[0]


def result(h: SimulatedHarness, call: CallOpened, success: bool, output: Any,
           error: str | None = None, now: float = 1.0, turn: str = "turn_1"
           ) -> tuple[list[Emit], dict[str, Any]]:
    d = function_result_delivery(
        delivery_id=f"dlv_{_dlv()}", runtime_id=RT, session_id=SID, turn_id=turn,
        call_id=call.call_id, name=call.name, success=success, output=output, error=error,
    )
    return h.handle(d, now), d


def expected(h: SimulatedHarness, call: CallOpened, d: dict[str, Any]) -> receipts.Expected:
    return receipts.expect(
        harness=h.harness, session_id=SID, call_id=call.call_id, name=call.name,
        success=d["success"], content=d["content"],
        native_session_id=call.native_ids.get("session_id"),
        thread_id=call.native_ids.get("thread_id"), turn_id=call.native_ids.get("turn_id"),
    )


def verdicts(h: SimulatedHarness, call: CallOpened, d: dict[str, Any], out: list[Emit]
             ) -> list[receipts.Verdict]:
    exp = expected(h, call, d)
    return [receipts.match_observation(exp, e.record) for e in out if e.record["native"]]


def turn_ends(h: SimulatedHarness, out: list[Emit]) -> list[TurnEnded]:
    return [c for c in (classify(h.harness, n) for n in natives(out))
            if isinstance(c, TurnEnded)]


def open_call(h: SimulatedHarness, name: str = "get_weather", turn: str = "turn_1"
              ) -> CallOpened:
    out = start(h, msg(t(f'please call {name} {{"city": "Paris"}}')), turn=turn)
    return opened_call(h, out)


# --------------------------------------------------------------------------- parse_calls


@pytest.mark.parametrize(
    ("text", "calls"),
    [
        ('call get_weather {"city":"Paris"}', [("get_weather", {"city": "Paris"})]),
        ('please call a.b-c {} and call x {"n": 1}', [("a.b-c", {}), ("x", {"n": 1})]),
        ("call get_weather", []),
        ("call get_weather {not json}", []),
        ('call f ["a list"]', []),
        ('recall f {"a": 1}', []),  # word boundary
        ('call f {"nested": {"a": [1, 2]}} trailing', [("f", {"nested": {"a": [1, 2]}})]),
    ],
)
def test_parse_calls(text: str, calls: list[tuple[str, Any]]) -> None:
    assert parse_calls(text) == calls


# --------------------------------------------------------------------------- messages


def test_claude_start_records_native_user_messages_in_order_and_echoes() -> None:
    h = make("claude_code")
    out = start(h, msg(t("look"), i(PNG), t("and"), i(JPG)), msg(i(PNG)))
    n = natives(out)
    assert n[0]["type"] == "system"
    users = [x for x in n if x["type"] == "user"]
    assert [u["message"]["content"] for u in users] == [
        [{"type": "text", "text": "look"},
         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                      "data": "iVBORw0KGgo="}},
         {"type": "text", "text": "and"},
         {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg",
                                      "data": "/9j/4AAQ"}}],
        [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                      "data": "iVBORw0KGgo="}}],
    ]
    assert len({u["uuid"] for u in users}) == 2  # a UUID per native user message
    assert all(u["session_id"] == users[0]["session_id"] for u in users)
    echo = n[-1]
    assert echo["type"] == "assistant"
    assert echo["message"]["content"][0]["text"] == "echo: look | and [+3 images]"
    for e in out:
        assert e.record["schema"] == "runtime.observation/1"
        assert e.record["session_id"] == SID and e.record["turn_id"] == "turn_1"
        assert e.record["runtime_id"] == RT and e.record["harness"] == "claude_code"
    assert len({e.record["observation_id"] for e in out}) == len(out)


def test_codex_start_flattens_the_batch_with_the_adapter() -> None:
    h = make("codex")
    messages = [msg(t("a"), i(PNG)), msg(t(" "))]
    out = start(h, *messages)
    n = natives(out)
    assert n[0]["method"] == "turn/started"
    user = n[1]["params"]["item"]
    assert user["type"] == "userMessage"
    assert user["content"] == codex.flatten_messages(messages)
    assert user["content"][2] == {"type": "text", "text": "\n\n"}
    assert n[2]["params"]["item"]["type"] == "agentMessage"


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_call_announced_natively_and_keeps_turn_open(harness: str) -> None:
    h = make(harness)
    call = open_call(h)
    assert call.name == "get_weather" and call.arguments == {"city": "Paris"}
    # pending call: idle never ends the Turn
    assert h.tick(100.0) == []
    assert h.next_deadline() is None


@pytest.mark.parametrize("harness", ["claude_code", "codex", "minimax_code"])
def test_idle_turn_ends_after_turn_idle(harness: str) -> None:
    h = make(harness, turn_idle_s=1.5)
    start(h, msg(t("hi")), now=10.0)
    assert h.next_deadline() == 11.5
    assert h.tick(11.4) == []
    out = h.tick(11.5)
    ends = turn_ends(h, out) if harness != "minimax_code" else []
    if harness != "minimax_code":
        assert [e.state for e in ends] == ["completed"]
    assert out[-1].record["turn_id"] == "turn_1"
    assert h.tick(20.0) == []  # once


def test_steer_joins_the_running_turn_and_resets_idle() -> None:
    h = make("claude_code", turn_idle_s=1.5)
    start(h, msg(t("one")), now=0.0)
    out = start(h, msg(t("two")), kind="steer", now=1.0)
    assert not [e for e in out if e.record.get("refusal")]
    assert h.tick(2.0) == []
    assert turn_ends(h, h.tick(2.5))[0].state == "completed"


def test_steer_for_an_ended_turn_is_refused() -> None:
    h = make("codex", turn_idle_s=1.0)
    start(h, msg(t("one")), now=0.0)
    h.tick(5.0)
    out = start(h, msg(t("late")), kind="steer", now=6.0)
    assert len(out) == 1 and out[0].record["native"] is None
    assert out[0].record["refusal"]["terminal"] is True


def test_duplicate_delivery_and_foreign_runtime_are_ignored() -> None:
    h = make("codex")
    d = message_delivery(delivery_id="dlv_x", runtime_id=RT, session_id=SID, turn_id="turn_1",
                         kind="start", messages=[msg(t("a"))])
    assert h.handle(d, 0.0)
    assert h.handle(d, 0.1) == []
    assert h.handle({**d, "delivery_id": "dlv_y", "runtime_id": "rt_other"}, 0.2) == []


# --------------------------------------------------------------------------- results


@pytest.mark.parametrize(
    ("harness", "success", "output", "error"),
    [
        ("claude_code", True, "sunny", None),
        ("claude_code", True, [t("chart"), i(PNG), t(""), i(JPG)], None),
        ("claude_code", False, [t("  padded "), t("é \u0085\ufeff")], "boom"),
        ("claude_code", True, None, None),
        ("codex", True, [i(PNG), t("x"), i(JPG)], None),
        ("codex", False, [t("partial"), i(PNG)], "failed\n"),
        ("codex", True, "", ""),
    ],
)
def test_result_applied_confirms_and_ends_turn(harness: str, success: bool, output: Any,
                                              error: str | None) -> None:
    h = make(harness)
    call = open_call(h)
    out, d = result(h, call, success, output, error)
    assert verdicts(h, call, d, out)[0] == receipts.CONFIRMED
    assert [e.state for e in turn_ends(h, out)] == ["completed"]
    assert out[-1].record["turn_id"] == "turn_1"
    assert all(e.delay_s == 0 for e in out)


@pytest.mark.parametrize(
    ("harness", "switch", "field"),
    [
        ("claude_code", "replay", "isReplay"),
        ("claude_code", "synthetic", "isSynthetic"),
        ("claude_code", "subagent", "parent_tool_use_id"),
        ("claude_code", "alter_text", "content[0].text"),
        ("claude_code", "drop_image", "content.count"),
        ("codex", "replay", "turnId"),
        ("codex", "synthetic", "item.status"),
        ("codex", "subagent", "threadId"),
        ("codex", "alter_text", "contentItems[0].text"),
        ("codex", "drop_image", "contentItems.count"),
    ],
)
def test_misbehaviour_switch_produces_a_record_that_does_not_confirm(
    harness: str, switch: str, field: str
) -> None:
    h = make(harness, switches=Switches().updated({switch: True}))
    call = open_call(h)
    out, d = result(h, call, True, [t("text"), i(PNG)])
    v = verdicts(h, call, d, out)
    assert v[0] == receipts.NotAMatch(field, v[0].reason)  # type: ignore[union-attr]
    assert receipts.CONFIRMED not in v
    # the same result without the switch confirms
    h.set_switches(Switches())
    call2 = open_call(h, "again", turn="turn_2")
    out2, d2 = result(h, call2, True, [t("text"), i(PNG)], turn="turn_2")
    assert receipts.CONFIRMED in verdicts(h, call2, d2, out2)


def test_alter_text_appends_the_suffix() -> None:
    h = make("claude_code", switches=Switches(alter_text=True))
    call = open_call(h)
    out, _ = result(h, call, True, "sunny")
    blocks = out[0].record["native"]["message"]["content"][0]["content"]
    assert blocks == [{"type": "text", "text": "sunny" + ALTERED_SUFFIX}]


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_release_calls_releases_instead_of_applying(harness: str) -> None:
    h = make(harness, switches=Switches(release_calls=True))
    call = open_call(h)
    out, d = result(h, call, True, "x")
    assert verdicts(h, call, d, out)[0] == receipts.RELEASED
    assert receipts.CONFIRMED not in verdicts(h, call, d, out)


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_refuse_results_sends_a_terminal_refusal_and_fails_the_turn(harness: str) -> None:
    h = make(harness, switches=Switches(refuse_results=True))
    call = open_call(h)
    out, d = result(h, call, True, "x")
    refusal = out[0].record
    assert refusal["native"] is None
    assert refusal["refusal"] == {
        "delivery_id": d["delivery_id"], "kind": "function_result", "call_id": call.call_id,
        "reason": refusal["refusal"]["reason"], "terminal": True,
    }
    assert refusal["turn_id"] == "turn_1"
    assert [e.state for e in turn_ends(h, out)] == ["failed"]


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_receipt_delay_delays_the_result_and_the_turn_end(harness: str) -> None:
    h = make(harness, switches=Switches(receipt_delay_s=12.0))
    call = open_call(h)
    out, d = result(h, call, True, "x")
    assert [e.delay_s for e in out] == [12.0, 12.0]
    assert verdicts(h, call, d, out)[0] == receipts.CONFIRMED


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_fail_turns_ends_every_turn_failed(harness: str) -> None:
    h = make(harness, switches=Switches(fail_turns=True), turn_idle_s=1.0)
    start(h, msg(t("hi")), now=0.0)
    assert [e.state for e in turn_ends(h, h.tick(1.0))] == ["failed"]


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_result_for_a_call_that_is_not_pending_is_refused(harness: str) -> None:
    h = make(harness)
    call = open_call(h)
    result(h, call, True, "first")
    out, _ = result(h, call, True, "again")
    assert len(out) == 1 and out[0].record["refusal"]["call_id"] == call.call_id


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_a_new_start_releases_the_pending_call_of_the_superseded_turn(harness: str) -> None:
    h = make(harness)
    call = open_call(h)
    out = start(h, msg(t("new")), turn="turn_2", now=1.0)
    d = {"success": True, "content": [t("x")]}
    v = verdicts(h, call, d, out)
    assert v[0] == receipts.RELEASED
    ends = [e for e in out if isinstance(classify(harness, e.record["native"]), TurnEnded)]
    assert ends[0].record["turn_id"] == "turn_1"


def test_claude_failed_result_with_image_is_refused_by_the_adapter() -> None:
    h = make("claude_code")
    call = open_call(h)
    out, _ = result(h, call, False, [i(PNG)], "bad")
    assert out[0].record["refusal"]["reason"].startswith("unsupported_content")
    assert [e.state for e in turn_ends(h, out)] == ["failed"]


def test_function_result_images_capability_off_refuses_image_results() -> None:
    h = make("codex", function_result_images=False)
    call = open_call(h)
    out, _ = result(h, call, True, [i(PNG)])
    assert out[0].record["native"] is None
    assert out[0].record["refusal"]["call_id"] == call.call_id
    call2 = open_call(h, "g", turn="turn_2")
    text_out, d = result(h, call2, True, "text only", turn="turn_2")
    assert receipts.CONFIRMED in verdicts(h, call2, d, text_out)


# --------------------------------------------------------------------------- capability / bound


@pytest.mark.parametrize("harness", ["minimax_code", "claude_code", "codex"])
def test_images_refused_terminally_when_not_supported(harness: str) -> None:
    h = make(harness, message_images=False)
    out = start(h, msg(t("marker"), i(PNG)))
    refusals = [e.record for e in out if e.record["native"] is None]
    assert len(refusals) == 1 and refusals[0]["refusal"]["terminal"] is True
    assert refusals[0]["refusal"]["kind"] == "start"
    assert "unsupported_content" in refusals[0]["refusal"]["reason"]
    # nothing of the message reached the harness
    assert not any("marker" in str(e.record["native"]) for e in out if e.record["native"])
    assert h.sessions[SID].turn is None  # the opening Turn failed


def test_minimax_takes_text_and_never_calls_functions() -> None:
    h = make("minimax_code")
    out = start(h, msg(t('call f {"a": 1}')))
    assert not [e for e in out if e.record["native"] is None]
    turn = h.sessions[SID].turn
    assert turn is not None and not turn.pending


@pytest.mark.parametrize(
    ("opening", "steers", "refused_at"),
    [
        (1, [62, 1], None),  # 63, then 64: both taken
        (1, [62, 1, 1], 2),  # the 65th is refused
        (63, [2], 0),  # a batch that would pass 64 is refused whole
        (64, [1], 0),
    ],
)
def test_claude_64_message_bound(opening: int, steers: list[int], refused_at: int | None
                                 ) -> None:
    h = make("claude_code")
    out = start(h, *[msg(t(f"o{k}")) for k in range(opening)])
    taken = sum(1 for n in natives(out) if n.get("type") == "user")
    assert taken == opening
    for idx, n_msgs in enumerate(steers):
        out = start(h, *[msg(t(f"s{idx}-{k}")) for k in range(n_msgs)], kind="steer")
        users = [n for n in natives(out) if n and n.get("type") == "user"]
        refusals = [e.record for e in out if e.record["native"] is None]
        if idx == refused_at:
            assert users == []  # no part of the batch submitted
            assert refusals[0]["refusal"]["terminal"] is True
            assert "turn_message_bound_exceeded" in refusals[0]["refusal"]["reason"]
            assert refusals[0]["refusal"]["code"] == REFUSAL_TURN_BOUND_EXCEEDED
            assert [e.state for e in turn_ends(h, out)] == ["failed"]
            # The end's envelope says why the bridge ended the Turn (storage's reason) and it
            # comes after the refusal, in the same ordered batch.
            end = out[-1].record
            assert end["native"]["type"] == "result" and end["turn_id"] == "turn_1"
            assert end["end_reason"] == refusals[0]["refusal"]["reason"]
            assert out.index(next(e for e in out if e.record["native"] is None)) < len(out) - 1
            return
        assert len(users) == n_msgs and not refusals
    assert refused_at is None


def test_turn_end_observations_classify_for_storage() -> None:
    for harness in ("claude_code", "codex"):
        h = make(harness, turn_idle_s=0.0)
        start(h, msg(t("x")))
        out = h.tick(0.0)
        assert isinstance(classify(harness, out[-1].record["native"]), TurnEnded)
        assert out[-1].record["turn_id"] == "turn_1"


def test_unknown_harness_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown harness"):
        make("gpt_code")


@pytest.mark.parametrize("harness", ["claude_code", "codex"])
def test_steer_after_the_native_turn_ended_is_refused_with_code_turn_ended(harness: str
                                                                          ) -> None:
    """Core resolves this refusal by handing the messages over again (sessions.py
    ``decide_steer_refused``), so the code must say exactly why."""
    h = make(harness, turn_idle_s=1.5)
    start(h, msg(t("one")), now=0.0)
    assert turn_ends(h, h.tick(1.5))  # the harness ends the Turn on its own
    out = start(h, msg(t("late steer")), kind="steer", now=2.0)
    assert len(out) == 1 and out[0].record["native"] is None
    refusal = out[0].record["refusal"]
    assert refusal["kind"] == "steer" and refusal["code"] == "turn_ended"
    # a fresh start for a new Turn is taken
    again = start(h, msg(t("late steer")), turn="turn_2", now=2.1)
    assert all(e.record.get("refusal") is None for e in again)

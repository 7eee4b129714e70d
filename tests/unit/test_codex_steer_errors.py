"""Which ``turn/steer`` errors mean the Turn has ended (issue 57 item 7).

Primary spec, "Core–Runtime wire": steering delivers messages into the running Turn. Core hands
a steer over again as the start of a new Turn only when the Runtime says the native Turn has
ended (refusal code ``turn_ended``, docs/runtime-boundary.md). The real ``codex app-server``
0.169 answers every ``turn/steer`` error with JSON-RPC code -32600; the messages below are what
it printed (probed offline on the cached binary): only "no active turn to steer" and "expected
active turn id `<ours>` but found `<another>`" say that the Turn the steer was for has ended.
Any other error leaves that Turn running natively: it is reported as that error (Core then
fails its Turn), never as ``turn_ended`` (which would re-send the messages as a new start and
interrupt the live native Turn), and the Runtime ends the native Turn itself so that the two
agree."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from runtimes.codex.live import _Proc, _RpcError
from tests.support.codex_live import driver_with_session

NATIVE_TURN = "01a24b80-4e22-7cb3-aa40-2ec502013228"
OTHER_TURN = "01a24b80-5055-75f3-b15f-267ac3532ec2"

# (codex's error, does it mean the steered Turn has ended?)
ERRORS: list[tuple[dict[str, Any], bool]] = [
    ({"code": -32600, "message": "no active turn to steer"}, True),
    ({"code": -32600, "message": f"expected active turn id `{NATIVE_TURN}` but found "
                                 f"`{OTHER_TURN}`"}, True),
    ({"code": -32600, "message": "input must not be empty"}, False),
    ({"code": -32600, "message": "thread not found: 00000000-0000-0000-0000-000000000000"},
     False),
    ({"code": -32600, "message": "Invalid request: unknown variant `bogus`, expected one of "
                                 "`text`, `image`"}, False),
    ({"code": -32600, "message": "cannot steer a compact turn"}, False),
    ({"code": -32001, "message": "Server overloaded; retry later."}, False),
]


def steer_with(tmp_path: Path, error: dict[str, Any]
               ) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    h, proc, out = driver_with_session(tmp_path, "thread_1", NATIVE_TURN)
    assert proc.turn is not None
    proc.turn.done.set()
    sent: list[tuple[str, dict[str, Any]]] = []

    async def request(_proc: _Proc, method: str, params: dict[str, Any]) -> dict[str, Any]:
        sent.append((method, params))
        if method == "turn/steer":
            raise _RpcError(method, error)
        return {}

    h._request = request  # type: ignore[method-assign]
    asyncio.run(h._messages("session_a", {
        "delivery_id": "dlv_1", "runtime_id": "rt_1", "session_id": "session_a",
        "turn_id": "turn_1", "kind": "steer",
        "messages": [{"role": "user", "content": [{"type": "input_text", "text": "and?"}]}]}))
    return out, sent


@pytest.mark.parametrize(("error", "ended"), ERRORS, ids=[e["message"][:40] for e, _ in ERRORS])
def test_only_the_error_that_means_the_turn_ended_is_turn_ended(
        tmp_path: Path, error: dict[str, Any], ended: bool) -> None:
    out, sent = steer_with(tmp_path, error)
    [refusal] = [r["refusal"] for r in out if r.get("refusal")]
    assert refusal["kind"] == "steer" and refusal["terminal"] is True
    if ended:
        assert refusal.get("code") == "turn_ended"
        assert [m for m, _ in sent] == ["turn/steer"]  # nothing left to end
    else:
        assert refusal.get("code") != "turn_ended", refusal
        assert error["message"] in refusal["reason"]
        # the native Turn is still live: the Runtime ends it, as Core ends its Turn
        assert ("turn/interrupt", {"threadId": "thread_1", "turnId": NATIVE_TURN}) in sent


def test_a_steer_of_a_turn_whose_process_died_is_turn_ended_not_a_new_native_turn(
        tmp_path: Path) -> None:
    """The process running Turn ``turn_1`` dies (``kill -9``): the Turn fails (the synthesized
    end). A steer of ``turn_1`` delivered afterwards is refused ``turn_ended`` — Core hands its
    messages over again as the next Turn — and no process is spawned for it: run as a new
    native Turn under ``turn_1``, the harness's side showed two ends for one Core Turn (the
    real-binary chaos row ``kill -9 harness mid-Turn`` found it)."""
    h, proc, out = driver_with_session(tmp_path, "thread_1", NATIVE_TURN)
    proc.process.kill = lambda: None  # type: ignore[method-assign]
    spawned: list[str] = []

    async def no_spawn(sid: str) -> _Proc:
        spawned.append(sid)
        raise AssertionError("a process spawned for a steer of an ended Turn")

    h._proc = no_spawn  # type: ignore[method-assign]

    async def run() -> None:
        await h._died(proc, "the codex process exited (exit code -9)")
        await h._messages("session_a", {
            "delivery_id": "dlv_2", "runtime_id": "rt_1", "session_id": "session_a",
            "turn_id": "turn_1", "kind": "steer",
            "messages": [{"role": "user", "content": [{"type": "input_text", "text": "and?"}]}]})

    asyncio.run(run())
    ends = [r for r in out if isinstance(r.get("native"), dict)
            and r["native"].get("method") == "turn/completed"]
    assert len(ends) == 1 and ends[0]["turn_id"] == "turn_1", ends
    [refusal] = [r["refusal"] for r in out if r.get("refusal")]
    assert refusal["code"] == "turn_ended" and refusal["delivery_id"] == "dlv_2", refusal
    assert spawned == []

"""Runtime registry model and binding choice (services/dispatcher/domain/binding.py)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.dispatcher.domain.binding import (
    FUNCTION_RESULT_IMAGES_UNSUPPORTED,
    MESSAGE_IMAGES_UNSUPPORTED,
    RuntimeInfo,
    check_delivery,
    choose,
    from_registration,
    ineligibility,
    is_alive,
    ready_by_harness,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
TIMEOUT = timedelta(seconds=15)


def rt(**over: Any) -> RuntimeInfo:
    base = RuntimeInfo(
        runtime_id="rt_" + "a" * 32,
        harness="claude_code",
        placements=frozenset({"none", "self_hosted"}),
        bridge_protocol=3,
        message_images=True,
        function_result_images=True,
        status="ready",
        heartbeat_at=NOW - timedelta(seconds=1),
    )
    return dataclasses.replace(base, **over)


# (id, runtime overrides, harness, placement, needs images, eligible?)
ELIGIBILITY: list[tuple[str, dict[str, Any], str, str, bool, bool]] = [
    ("ready claude bridge 3", {}, "claude_code", "none", False, True),
    ("image session, runtime with message_images", {}, "claude_code", "none", True, True),
    (
        "image session, runtime without message_images",
        {"message_images": False},
        "claude_code",
        "none",
        True,
        False,
    ),
    (
        "text session, runtime without message_images",
        {"message_images": False},
        "claude_code",
        "none",
        False,
        True,
    ),
    ("claude bridge 2 never", {"bridge_protocol": 2}, "claude_code", "none", False, False),
    (
        "claude bridge 2 never, even with images",
        {"bridge_protocol": 2},
        "claude_code",
        "none",
        True,
        False,
    ),
    ("claude bridge missing", {"bridge_protocol": None}, "claude_code", "none", False, False),
    ("claude bridge 4 unknown", {"bridge_protocol": 4}, "claude_code", "none", False, False),
    (
        "codex ignores bridge protocol",
        {"harness": "codex", "bridge_protocol": None},
        "codex",
        "none",
        False,
        True,
    ),
    (
        "codex with bridge 1",
        {"harness": "codex", "bridge_protocol": 1},
        "codex",
        "none",
        False,
        True,
    ),
    ("draining takes no new Sessions", {"status": "draining"}, "claude_code", "none", False, False),
    ("gone", {"status": "gone"}, "claude_code", "none", False, False),
    (
        "gone with a fresh heartbeat",
        {"status": "gone", "heartbeat_at": NOW},
        "claude_code",
        "none",
        False,
        False,
    ),
    (
        "heartbeat exactly at timeout is alive",
        {"heartbeat_at": NOW - TIMEOUT},
        "claude_code",
        "none",
        False,
        True,
    ),
    (
        "heartbeat past timeout",
        {"heartbeat_at": NOW - TIMEOUT - timedelta(milliseconds=1)},
        "claude_code",
        "none",
        False,
        False,
    ),
    ("placement unsupported", {}, "claude_code", "openai_hosted", False, False),
    ("placement supported", {}, "claude_code", "self_hosted", False, True),
    ("harness mismatch", {"harness": "codex"}, "claude_code", "none", False, False),
    (
        "minimax",
        {"harness": "minimax_code", "bridge_protocol": None, "message_images": False},
        "minimax_code",
        "none",
        False,
        True,
    ),
]


@pytest.mark.parametrize(
    ("over", "harness", "placement", "images", "expected"),
    [c[1:] for c in ELIGIBILITY],
    ids=[c[0] for c in ELIGIBILITY],
)
def test_eligibility(
    over: dict[str, Any], harness: str, placement: str, images: bool, expected: bool
) -> None:
    r = rt(**over)
    assert (ineligibility(r, harness, placement, images, NOW, TIMEOUT) is None) is expected
    reason = ineligibility(r, harness, placement, images, NOW, TIMEOUT)
    assert (reason is None) is expected


def test_ineligibility_reason_names_the_capability() -> None:
    reason = ineligibility(rt(message_images=False), "claude_code", "none", True, NOW, TIMEOUT)
    assert reason is not None and reason.startswith(MESSAGE_IMAGES_UNSUPPORTED)


def test_is_alive() -> None:
    assert is_alive(rt(), NOW, TIMEOUT)
    assert not is_alive(rt(heartbeat_at=NOW - timedelta(seconds=16)), NOW, TIMEOUT)
    assert not is_alive(rt(status="gone"), NOW, TIMEOUT)
    assert is_alive(rt(status="draining"), NOW, TIMEOUT)


# (case, RuntimeInfo overrides, counted as ready for its harness)
READY = [
    ("ready", {}, True),
    ("ready without images", {"message_images": False, "function_result_images": False}, True),
    ("draining", {"status": "draining"}, False),
    ("gone", {"status": "gone"}, False),
    ("heartbeat at the timeout", {"heartbeat_at": NOW - TIMEOUT}, True),
    ("heartbeat missed", {"heartbeat_at": NOW - TIMEOUT - timedelta(seconds=1)}, False),
    ("claude bridge 2", {"bridge_protocol": 2}, False),
    ("claude without bridge", {"bridge_protocol": None}, False),
    ("codex without bridge", {"harness": "codex", "bridge_protocol": None}, True),
    ("no placement", {"placements": frozenset()}, False),
    ("one placement", {"placements": frozenset({"self_hosted"})}, True),
]


@pytest.mark.parametrize(("over", "ready"), [c[1:] for c in READY], ids=[c[0] for c in READY])
def test_ready_by_harness_counts_runtimes_that_could_take_a_session(
        over: dict[str, Any], ready: bool) -> None:
    r = rt(**over)
    counts = ready_by_harness([r], NOW, TIMEOUT)
    assert counts == {"codex": 0, "claude_code": 0, "minimax_code": 0} | {r.harness: int(ready)}


def test_ready_by_harness_names_every_known_harness_and_only_those() -> None:
    assert ready_by_harness([], NOW, TIMEOUT) == {"codex": 0, "claude_code": 0,
                                                  "minimax_code": 0}
    runtimes = [rt(runtime_id=f"rt_{i}") for i in range(3)] + [
        rt(runtime_id="rt_c", harness="codex"), rt(runtime_id="rt_x", harness="other")]
    assert ready_by_harness(runtimes, NOW, TIMEOUT) == {"codex": 1, "claude_code": 3,
                                                        "minimax_code": 0}


def test_image_session_never_binds_to_only_ready_runtime_without_message_images() -> None:
    only = rt(runtime_id="rt_1", message_images=False)
    kw: dict[str, Any] = dict(
        harness="claude_code",
        placement="none",
        needs_message_images=True,
        now=NOW,
        heartbeat_timeout=TIMEOUT,
    )
    assert choose([only], {}, **kw) is None
    capable = rt(runtime_id="rt_2", message_images=True)
    assert choose([only, capable], {"rt_2": 100}, **kw) == capable


def test_choose_never_uses_bridge_2_even_when_idle() -> None:
    old = rt(runtime_id="rt_old", bridge_protocol=2)
    new = rt(runtime_id="rt_new")
    kw: dict[str, Any] = dict(
        harness="claude_code",
        placement="none",
        needs_message_images=False,
        now=NOW,
        heartbeat_timeout=TIMEOUT,
    )
    assert choose([old], {}, **kw) is None
    assert choose([old, new], {"rt_new": 50}, **kw) == new


def test_choose_least_loaded() -> None:
    rts = [rt(runtime_id=f"rt_{i}") for i in range(3)]
    got = choose(
        rts,
        {"rt_0": 5, "rt_1": 2, "rt_2": 3},
        harness="claude_code",
        placement="none",
        needs_message_images=False,
        now=NOW,
        heartbeat_timeout=TIMEOUT,
    )
    assert got is not None and got.runtime_id == "rt_1"


def test_choose_tie_break_deterministic_without_session() -> None:
    rts = [rt(runtime_id="rt_b"), rt(runtime_id="rt_a"), rt(runtime_id="rt_c")]
    kw: dict[str, Any] = dict(
        harness="claude_code",
        placement="none",
        needs_message_images=False,
        now=NOW,
        heartbeat_timeout=TIMEOUT,
    )
    got = choose(rts, {}, **kw)
    assert got is not None and got.runtime_id == "rt_a"
    assert choose(list(reversed(rts)), {}, **kw) == got


def test_choose_spreads_sessions() -> None:
    rts = [rt(runtime_id=f"rt_{i}") for i in range(4)]
    load: Counter[str] = Counter()
    for n in range(100):
        got = choose(
            rts,
            load,
            harness="claude_code",
            placement="none",
            needs_message_images=False,
            now=NOW,
            heartbeat_timeout=TIMEOUT,
            session_id=f"session_{n}",
        )
        assert got is not None
        load[got.runtime_id] += 1
    assert sorted(load.values()) == [25, 25, 25, 25]


def test_choose_rendezvous_tie_break_is_deterministic_and_spreads() -> None:
    rts = [rt(runtime_id=f"rt_{i}") for i in range(4)]
    picks: Counter[str] = Counter()
    for n in range(400):
        kw: dict[str, Any] = dict(
            harness="claude_code",
            placement="none",
            needs_message_images=False,
            now=NOW,
            heartbeat_timeout=TIMEOUT,
            session_id=f"session_{n}",
        )
        a = choose(rts, {}, **kw)
        b = choose(list(reversed(rts)), {}, **kw)
        assert a == b
        assert a is not None
        picks[a.runtime_id] += 1
    # equal load: every Runtime gets a share, not always the same one
    assert len(picks) == 4 and min(picks.values()) > 50


# (id, message_images, function_result_images, kind, has images, refusal code or None)
DELIVERY: list[tuple[str, bool, bool, str, bool, str | None]] = [
    ("start text, no caps", False, False, "start", False, None),
    ("start images, message_images", True, False, "start", True, None),
    ("start images, no message_images", False, True, "start", True, MESSAGE_IMAGES_UNSUPPORTED),
    ("steer images, no message_images", False, True, "steer", True, MESSAGE_IMAGES_UNSUPPORTED),
    ("steer text, no message_images", False, False, "steer", False, None),
    ("result text, no caps (not checked)", False, False, "function_result", False, None),
    ("result images, function_result_images", False, True, "function_result", True, None),
    (
        "result images, only message_images",
        True,
        False,
        "function_result",
        True,
        FUNCTION_RESULT_IMAGES_UNSUPPORTED,
    ),
]


@pytest.mark.parametrize(
    ("msg_img", "fr_img", "kind", "images", "code"),
    [c[1:] for c in DELIVERY],
    ids=[c[0] for c in DELIVERY],
)
def test_check_delivery(
    msg_img: bool, fr_img: bool, kind: str, images: bool, code: str | None
) -> None:
    got = check_delivery(rt(message_images=msg_img, function_result_images=fr_img), kind, images)
    if code is None:
        assert got is None
    else:
        assert got is not None and got.startswith(code + ":")


REG = {
    "schema": "runtime.registration/1",
    "runtime_id": "rt_" + "b" * 32,
    "harness": "claude_code",
    "bridge_protocol": 3,
    "placements": ["none", "self_hosted"],
    "capabilities": {"message_images": True, "function_result_images": False},
    "status": "ready",
    "heartbeat_at": "2025-01-01T11:59:59Z",
}


def test_from_registration() -> None:
    r = from_registration(REG)
    assert r.runtime_id == REG["runtime_id"]
    assert r.placements == frozenset({"none", "self_hosted"})
    assert r.bridge_protocol == 3
    assert r.message_images is True and r.function_result_images is False
    assert r.heartbeat_at == NOW - timedelta(seconds=1)
    assert ineligibility(r, "claude_code", "none", True, NOW, TIMEOUT) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"schema": "runtime.registration/2"},
        {"status": "sleeping"},
        {"bridge_protocol": "3"},
        {"bridge_protocol": True},
        {"placements": "none"},
        {"heartbeat_at": "2025-01-01T11:59:59"},  # no time zone
        {"heartbeat_at": "yesterday"},
    ],
)
def test_from_registration_rejects_malformed(bad: dict[str, Any]) -> None:
    with pytest.raises((ValueError, TypeError, KeyError)):
        from_registration({**REG, **bad})


def test_capability_must_be_literal_true() -> None:
    r = from_registration({**REG, "capabilities": {"message_images": "yes"}})
    assert r.message_images is False and r.function_result_images is False

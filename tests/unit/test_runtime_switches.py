"""Misbehaviour switches and the runtime's command line (runtimes/switches.py, main.py)."""

from __future__ import annotations

from typing import Any

import pytest

from runtimes.main import build_parser, config_from_args, switches_from_args
from runtimes.switches import NAMES, Switches, from_env, parse_assignments


def test_defaults_are_the_correct_behaviour() -> None:
    assert Switches().active() == {}
    assert set(NAMES) == {
        "receipt_delay_s", "release_calls", "replay", "synthetic", "subagent", "alter_text",
        "drop_image", "refuse_results", "fail_turns",
    }


@pytest.mark.parametrize(
    ("changes", "active"),
    [
        ({"alter_text": True}, {"alter_text": True}),
        ({"alter_text": "yes"}, {"alter_text": True}),
        ({"replay": "1", "subagent": "on"}, {"replay": True, "subagent": True}),
        ({"receipt_delay_s": 12}, {"receipt_delay_s": 12.0}),
        ({"receipt_delay_s": "0.5"}, {"receipt_delay_s": 0.5}),
        ({"fail_turns": False}, {}),
    ],
)
def test_updated(changes: dict[str, Any], active: dict[str, Any]) -> None:
    assert Switches().updated(changes).active() == active


@pytest.mark.parametrize(
    "changes",
    [
        {"nope": True},
        {"alter_text": "maybe"},
        {"alter_text": 2},
        {"receipt_delay_s": -1},
        {"receipt_delay_s": True},
        {"receipt_delay_s": "soon"},
    ],
)
def test_invalid_changes_raise_and_apply_nothing(changes: dict[str, Any]) -> None:
    s = Switches(replay=True)
    with pytest.raises(ValueError):
        s.updated(changes)
    assert s.active() == {"replay": True}


def test_assignments_and_env() -> None:
    assert parse_assignments(["alter-text", "receipt_delay_s=3"]) == {
        "alter_text": True, "receipt_delay_s": 3.0}
    assert from_env({"SESSION_CORE_RUNTIME_DROP_IMAGE": "true", "OTHER": "x"}) == {
        "drop_image": True}


def test_flags_override_set_override_env() -> None:
    args = build_parser().parse_args(
        ["--set", "replay=true", "--set", "receipt_delay_s=2", "--receipt-delay-s", "12",
         "--alter-text"])
    sw = switches_from_args(args, environ={"SESSION_CORE_RUNTIME_FAIL_TURNS": "1",
                                           "SESSION_CORE_RUNTIME_REPLAY": "0"})
    assert sw.active() == {"receipt_delay_s": 12.0, "replay": True, "alter_text": True,
                           "fail_turns": True}


@pytest.mark.parametrize(
    ("argv", "message_images", "function_result_images"),
    [
        (["--harness", "claude_code"], True, True),
        (["--harness", "codex", "--no-function-result-images"], True, False),
        (["--harness", "minimax_code"], False, False),
        (["--harness", "claude_code", "--no-message-images"], False, True),
    ],
)
def test_config_capabilities(argv: list[str], message_images: bool,
                             function_result_images: bool) -> None:
    p = build_parser()
    cfg = config_from_args(p.parse_args(argv), p)
    assert cfg.message_images is message_images
    assert cfg.function_result_images is function_result_images
    assert cfg.runtime_id.startswith("rt_") and len(cfg.runtime_id) == 35
    assert cfg.placements == ["none", "self_hosted"] and cfg.bridge_protocol == 3
    assert cfg.heartbeat_s == 3.0 and cfg.turn_idle_s == 1.5


def test_config_options() -> None:
    p = build_parser()
    cfg = config_from_args(p.parse_args([
        "--runtime-id", "rt_" + "1" * 32, "--placements", "self_hosted,openai_hosted",
        "--bridge-protocol", "2", "--status", "draining", "--turn-idle-ms", "300",
        "--heartbeat-s", "0.5"]), p)
    assert cfg.runtime_id == "rt_" + "1" * 32
    assert cfg.placements == ["self_hosted", "openai_hosted"]
    assert (cfg.bridge_protocol, cfg.status, cfg.turn_idle_s, cfg.heartbeat_s) == (
        2, "draining", 0.3, 0.5)


def test_bad_placement_is_a_usage_error() -> None:
    p = build_parser()
    with pytest.raises(SystemExit):
        config_from_args(p.parse_args(["--placements", "moon"]), p)

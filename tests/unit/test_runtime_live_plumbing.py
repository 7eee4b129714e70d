"""The real-engine plumbing: registration reports the live harness's capabilities, and the
command line builds a live harness only for ``--engine real``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from runtimes import main as runtime_main
from runtimes.app import RuntimeConfig, registration
from runtimes.harness import SimulatedHarness
from runtimes.live import EmitFn, LiveOptions


class _Live:
    harness = "codex"

    def __init__(self, images: bool) -> None:
        self.images = images

    def capabilities(self) -> dict[str, bool]:
        return {"message_images": self.images, "function_result_images": self.images}

    async def start(self, emit: EmitFn) -> None: ...

    async def handle(self, delivery: Mapping[str, Any]) -> None: ...

    async def stop(self) -> None: ...


@pytest.mark.parametrize("images", [True, False])
def test_registration_reports_the_live_harness_capabilities(images: bool) -> None:
    config = RuntimeConfig(runtime_id="rt_" + "0" * 32, harness="codex")
    sim = SimulatedHarness(runtime_id=config.runtime_id, harness="codex")  # images: yes
    rec = registration(config, sim, "ready", _Live(images))
    assert rec["capabilities"] == {"message_images": images, "function_result_images": images}
    assert rec["engine"] == "real"
    assert registration(config, sim, "ready")["engine"] == "simulated"


def test_engine_real_builds_a_live_harness_from_the_flags(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    seen: list[LiveOptions] = []
    monkeypatch.setattr(runtime_main, "build_live",
                        lambda o: seen.append(o) or _Live(o.images))
    parser = runtime_main.build_parser()
    args = parser.parse_args(["--harness", "codex", "--engine", "real", "--model-base-url",
                              "http://127.0.0.1:1/v1", "--no-images", "--model", "m1"])
    config = runtime_main.config_from_args(args, parser)
    live = runtime_main.live_from_args(args, config, parser)
    assert live is not None and live.capabilities()["message_images"] is False
    assert seen[0].model == "m1" and seen[0].model_base_url == "http://127.0.0.1:1/v1"
    assert seen[0].functions[0]["name"] == "get_weather"
    args = parser.parse_args(["--harness", "codex"])
    assert runtime_main.live_from_args(args, config, parser) is None


def test_engine_real_needs_a_model_url() -> None:
    parser = runtime_main.build_parser()
    args = parser.parse_args(["--harness", "codex", "--engine", "real"])
    config = runtime_main.config_from_args(args, parser)
    with pytest.raises(SystemExit):
        runtime_main.live_from_args(args, config, parser)

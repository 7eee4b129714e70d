"""A Runtime's configuration and its ``runtime.registration/1`` record (CONTRACT §2): published
on ``runtime.registrations`` (compacted, keyed by ``runtime_id``) at start, every
``heartbeat_s`` and whenever its switches or status change; ``status: "gone"`` on a clean stop
(``runtimes.app`` does the publishing)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from runtimes.harness import SimulatedHarness
from runtimes.live import LiveHarness
from runtimes.switches import Switches
from shared import records
from shared.domain.harnesses.claude_code import BRIDGE_PROTOCOL
from shared.kafka import now_rfc3339
from shared.logging import get_logger

log = get_logger(__name__)

STATUSES = ("ready", "draining", "gone")


@dataclass
class RuntimeConfig:
    runtime_id: str
    harness: str
    placements: list[str] = field(default_factory=lambda: ["none", "self_hosted"])
    bridge_protocol: int = BRIDGE_PROTOCOL
    message_images: bool = True
    function_result_images: bool = True
    status: str = "ready"
    heartbeat_s: float = 3.0
    turn_idle_s: float = 1.5
    switches: Switches = field(default_factory=Switches)
    # deliveries sealed to a key pair made at start (shared/sealing.py, docs/security.md)
    sealed_deliveries: bool = False


def registration(config: RuntimeConfig, harness: SimulatedHarness, status: str,
                 live: LiveHarness | None = None, incarnation: str | None = None,
                 sealed_key: str | None = None) -> dict[str, Any]:
    """The ``runtime.registration/1`` record (CONTRACT §2) plus informative extras:
    ``switches`` (the misbehaviour switches in force), ``turn_idle_ms``, ``engine``
    (``simulated`` or ``real``) and ``incarnation`` (this process's own id, new at every start:
    Core fails the Turns a restarted Runtime lost). A real engine reports the capabilities of
    its harness and model configuration (``LiveHarness.capabilities``)."""
    caps = live.capabilities() if live is not None else {
        "message_images": harness.message_images,
        "function_result_images": harness.function_result_images,
    }
    return records.registration_record(
        runtime_id=config.runtime_id,
        harness=config.harness,
        bridge_protocol=config.bridge_protocol,
        placements=list(config.placements),
        message_images=bool(caps.get("message_images")),
        function_result_images=bool(caps.get("function_result_images")),
        status=status,
        heartbeat_at=now_rfc3339(),
        sealed_key=sealed_key,
        switches=harness.switches.active() if live is None else {},
        turn_idle_ms=int(config.turn_idle_s * 1000),
        engine="simulated" if live is None else "real",
        **({"incarnation": incarnation} if incarnation else {}),
    )


def simulated_harness(config: RuntimeConfig) -> SimulatedHarness:
    """The simulation ``config`` describes (the real engine's ``LiveHarness`` replaces it)."""
    return SimulatedHarness(
        runtime_id=config.runtime_id, harness=config.harness, switches=config.switches,
        turn_idle_s=config.turn_idle_s, message_images=config.message_images,
        function_result_images=config.function_result_images)


def consumer_group(runtime_id: str) -> str:
    return f"session-core-runtime-{runtime_id}"


async def heartbeat(register: Callable[[], Awaitable[None]], interval_s: float) -> None:
    """Register again every ``interval_s`` (a failure is logged, the next beat tries again)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await register()
        except Exception:
            log.exception("runtime.heartbeat_failed")

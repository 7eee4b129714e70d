"""How every Session Core process starts and runs, the same way: its settings, logging bound to
its name and tracing (``begin``); then, for a service, the service built from its settings,
started, ``/healthz``, ``/readyz`` and ``/metrics`` served beside it, and stopped on
SIGTERM/SIGINT (``run_service``, ``serve``). Each service's ``__main__`` calls ``run_service``
with its own Service class; the Runtime calls ``begin`` and ``serve``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol

from shared import eventloop, tracing
from shared.health import Check, HealthServer, serve_health
from shared.logging import configure_logging
from shared.service import run_until_stopped
from shared.settings import Settings, get_settings


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class CheckedService(Service, Protocol):
    async def ready(self) -> bool: ...


def begin(name: str) -> Settings:
    """The process's settings, with logging bound to ``name`` and tracing configured (the
    standard OTEL_* variables; off unless they name an exporter: docs/operations.md)."""
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_format, service=name)
    try:
        tracing.configure()
    except tracing.TracingConfigError as exc:
        sys.exit(f"session-core {name}: {exc}")
    return settings


async def serve(settings: Settings, service: Service, ready: Check,
                started: Callable[[], None] | None = None) -> None:
    """Start ``service``, serve the health routes on their own port (admission's too: the chart
    scrapes ``/metrics`` there, and its Ingress never routes it), call ``started`` (if given),
    and run until SIGTERM/SIGINT; then stop the health server and the service."""
    health: HealthServer | None = None

    async def start() -> None:
        nonlocal health
        await service.start()
        health = await serve_health(settings.health_port, ready, settings.health_host)
        if started is not None:
            started()

    async def stop() -> None:
        if health is not None:
            await health.stop()
        await service.stop()

    await run_until_stopped(start, stop)


def run_service(name: str, build: Callable[[Settings], CheckedService]) -> None:
    """``python -m services.<name>``: the service ``build`` makes from the settings, run on the
    chosen event loop until SIGTERM/SIGINT."""
    settings = begin(name)

    async def main() -> None:
        service = build(settings)
        await serve(settings, service, service.ready)

    eventloop.run(main(), settings.event_loop)

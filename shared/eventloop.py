"""The event loop every Session Core process runs on: uvloop by default, asyncio's own loop with
``SESSION_CORE_EVENT_LOOP=asyncio`` (or where uvloop is not installed: it has no Windows build).

Why uvloop: each request crosses many awaits (HTTP, the hand-over to Kafka, storage's batch,
the store's round trips, the reply), and the services spend a large share of their CPU in the
loop itself. On the pipeline benchmark the product stored ~20 % more Items per second with both
sides on uvloop than with both on asyncio's loop (docs/decisions.md, "uvloop"). Nothing in the
services depends on which loop runs them."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar, get_args

T = TypeVar("T")
EventLoop = Literal["uvloop", "asyncio"]  # the setting's type (``Settings.event_loop``)
CHOICES: tuple[str, ...] = get_args(EventLoop)


def uvloop_installed() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def chosen(setting: str) -> str:
    """The loop ``run`` will use for this setting (``SESSION_CORE_EVENT_LOOP``)."""
    if setting not in CHOICES:
        raise ValueError(f"event_loop: expected one of {CHOICES}, got {setting!r}")
    return "uvloop" if setting == "uvloop" and uvloop_installed() else "asyncio"


def run(main: Coroutine[Any, Any, T], setting: str | None = None) -> T:
    """``asyncio.run(main)`` on the chosen loop; ``setting`` defaults to the process's
    ``Settings().event_loop``."""
    if setting is None:
        from shared.settings import get_settings

        setting = get_settings().event_loop
    if chosen(setting) == "uvloop":
        import uvloop

        return uvloop.run(main)
    return asyncio.run(main)

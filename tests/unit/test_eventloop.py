"""The services' event loop (shared/eventloop.py): uvloop by default, asyncio's own loop with
``SESSION_CORE_EVENT_LOOP=asyncio``; anything else is refused before a service starts."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from shared import eventloop
from shared.settings import Settings, get_settings


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


@pytest.mark.parametrize(("setting", "module"), [("uvloop", "uvloop"), ("asyncio", "asyncio")])
def test_run_runs_the_coroutine_on_the_chosen_loop(setting: str, module: str) -> None:
    assert eventloop.uvloop_installed()  # a dependency of the server extra on Linux
    assert eventloop.chosen(setting) == module
    assert eventloop.run(loop_module(), setting) == module


def test_the_default_setting_is_uvloop_and_the_environment_can_choose_asyncio(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SESSION_CORE_EVENT_LOOP", raising=False)
    get_settings.cache_clear()  # run() without a setting reads the process's settings
    try:
        assert Settings().event_loop == "uvloop"
        assert eventloop.run(loop_module()) == "uvloop"
        monkeypatch.setenv("SESSION_CORE_EVENT_LOOP", "asyncio")
        get_settings.cache_clear()
        assert Settings().event_loop == "asyncio"
        assert eventloop.run(loop_module()) == "asyncio"
    finally:
        get_settings.cache_clear()


def test_an_unknown_loop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESSION_CORE_EVENT_LOOP", "trio")
    with pytest.raises(ValidationError):
        Settings()
    with pytest.raises(ValueError, match="expected one of"):
        eventloop.chosen("trio")


def test_without_uvloop_installed_the_default_falls_back_to_asyncio(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eventloop, "uvloop_installed", lambda: False)
    assert eventloop.chosen("uvloop") == "asyncio"
    assert eventloop.run(loop_module(), "uvloop") == "asyncio"

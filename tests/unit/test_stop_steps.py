"""A service's stop goes on past a step that hangs (shared.service.StopSteps): the step is
cancelled after its budget, the next steps still run, and each step's time is kept."""

from __future__ import annotations

import asyncio

import pytest

from shared.service import StopSteps


async def test_a_hanging_step_is_cancelled_and_the_stop_goes_on() -> None:
    steps = StopSteps(budget=0.2)
    ran: list[str] = []
    cancelled = asyncio.Event()

    async def hangs() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def quick() -> None:
        ran.append("quick")

    await asyncio.wait_for(steps.run("hangs", hangs()), 3)
    await steps.run("quick", quick())
    assert cancelled.is_set()
    assert ran == ["quick"]
    assert steps.took["hangs"] >= 0.2 and "quick" in steps.took


async def test_a_step_that_fails_raises_its_own_error() -> None:
    async def fails() -> None:
        raise ValueError("broken close")

    with pytest.raises(ValueError, match="broken close"):
        await StopSteps(budget=1).run("fails", fails())


async def test_a_step_within_its_budget_is_waited_for() -> None:
    steps = StopSteps(budget=1)
    done: list[int] = []

    async def slowish() -> None:
        await asyncio.sleep(0.1)
        done.append(1)

    await steps.run("slowish", slowish())
    assert done == [1] and steps.took["slowish"] >= 0.1

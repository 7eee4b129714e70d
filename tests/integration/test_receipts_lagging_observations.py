"""A restarted receipt tracker whose observations consumer lags (after a kill -9 its group
rejoins seconds after the deliveries consumer's) must not decide a deadline before it has read
the observations published up to that deadline: a receipt the Runtime printed in time makes the
call ``applied`` even when it is read after the deadline; a call with no receipt still turns
``uncertain`` as soon as the consumer has caught up.

The lag is made deterministic: the restarted tracker's observation handler waits on a gate that
the test opens only after both calls' deadlines have passed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from faststream.kafka.annotations import KafkaMessage

from services.receipts.app import ReceiptService
from shared.domain.receipts import REASON_APPLIED
from shared.settings import Settings
from tests.support.calls import (
    TIMEOUT_REASON,
    WINDOW,
    at,
    claude_receipt,
    is_app,
    only_application,
    open_call,
)
from tests.support.system import Inbox, System, ts

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)


class LaggingObservations(ReceiptService):
    """The tracker with its observations consumer held back until ``gate`` is set."""

    def __init__(self, settings: Settings) -> None:
        self.gate = asyncio.Event()
        self.held = asyncio.Event()  # the consumer has a batch in hand and is held
        super().__init__(settings)

    async def on_observations(self, body: Any, msg: KafkaMessage) -> None:
        self.held.set()
        await self.gate.wait()
        await super().on_observations(body, msg)


async def test_a_lagging_observations_consumer_holds_the_deadline(system: System) -> None:
    rt = await system.runtime("claude_code")
    inbox = Inbox(rt)
    try:
        confirmed, silent = await asyncio.gather(open_call(system, rt, inbox, output="yes"),
                                                 open_call(system, rt, inbox, output="no"))
        await system.receipts.stop()
        # The Runtime prints the receipt well inside the window, while no tracker runs.
        await rt.observe(confirmed.sid, claude_receipt(confirmed))
        assert time.time() < confirmed.handed_at + WINDOW - 2.0

        lagging = LaggingObservations(system.settings)
        system.receipts = lagging
        await lagging.start()
        await asyncio.wait_for(lagging.held.wait(), WINDOW)
        last_deadline = max(confirmed.handed_at, silent.handed_at) + WINDOW
        await at(last_deadline + 1.0)  # both deadlines have passed while the consumer lags
        for call in (confirmed, silent):
            assert not any(map(is_app(call.call_id), system.items.by_session[call.sid])), \
                "a deadline was decided before the observations up to it were read"

        released = time.time()
        lagging.gate.set()
        app = await only_application(system, confirmed)
        assert (app["state"], app["reason"]) == ("applied", REASON_APPLIED)
        app = await only_application(system, silent)
        assert (app["state"], app["reason"]) == ("uncertain", TIMEOUT_REASON)
        assert ts(app) - released < 1.5, ts(app) - released  # promptly once caught up
    finally:
        await inbox.close()

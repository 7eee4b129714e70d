"""The receipt tracker restarts in the middle of receipt windows ("Durable
deadlines"): pending deadlines live in the store, so a new tracker on the same settings keeps
each call's original deadline — measured from the delivery's Kafka timestamp, not from the
restart — and a call whose deadline passed while no tracker ran turns ``uncertain`` at once.

Timeline (seconds after call B's delivery):
  0 B delivered · 6 A and D delivered · 8 the tracker stops · 8.5 C delivered, D's receipt
  arrives (no tracker running) · 11 a new tracker starts: B is overdue → uncertain at once;
  D → applied (its receipt came in time); A at A+10 and C at C+10, not restart+10."""

from __future__ import annotations

import asyncio
import time

import pytest

from services.receipts.app import ReceiptService
from shared.domain.receipts import REASON_APPLIED
from tests.support.calls import (
    TIMEOUT_REASON,
    WINDOW,
    Call,
    at,
    claude_receipt,
    is_app,
    only_application,
    open_call,
)
from tests.support.system import Inbox, System, ts

pytestmark = pytest.mark.faults


async def test_restart_keeps_original_deadlines(system: System) -> None:
    rt = await system.runtime("claude_code")
    inbox = Inbox(rt)
    try:
        b = await open_call(system, rt, inbox, output="b")
        await at(b.handed_at + 6.0)
        a, d = await asyncio.gather(open_call(system, rt, inbox, output="a"),
                                    open_call(system, rt, inbox, output="d"))
        await at(b.handed_at + 8.0)
        assert not any(map(is_app(b.call_id), system.items.by_session[b.sid]))
        await system.receipts.stop()
        # the stopped tracker's client is closed: read its database through another client
        tracker_db = system.dispatcher.client[system.settings.database_of("receipts")]
        pending = {doc["_id"] async for doc in tracker_db.pending_receipts.find({})}
        assert {f"{x.sid}/{x.call_id}" for x in (a, b, d)} <= pending

        # While no tracker runs: a new delivery, and D's exact receipt, both inside the window.
        c = await open_call(system, rt, inbox, output="c")
        await rt.observe(d.sid, claude_receipt(d))
        await at(b.handed_at + WINDOW + 1.0)
        assert not any(map(is_app(b.call_id), system.items.by_session[b.sid]))

        restarted = time.time()
        system.receipts = ReceiptService(system.settings)
        await system.receipts.start()

        async def check_b() -> None:  # overdue on restart: uncertain at once
            app = await only_application(system, b)
            assert (app["state"], app["reason"]) == ("uncertain", TIMEOUT_REASON)
            assert 0.0 <= ts(app) - restarted < 1.5, ts(app) - restarted

        async def check_kept(call_label: str, call: Call) -> None:
            app = await only_application(system, call)
            assert (app["state"], app["reason"]) == ("uncertain", TIMEOUT_REASON), call_label
            late = ts(app) - (call.handed_at + WINDOW)
            assert 0.0 <= late < 1.0, (call_label, late)

        async def check_d() -> None:  # its receipt arrived in time, while no tracker ran
            app = await only_application(system, d)
            assert (app["state"], app["reason"]) == ("applied", REASON_APPLIED)

        await asyncio.gather(check_b(), check_kept("A", a), check_kept("C", c), check_d())
        # The window ends 10 s after delivery, well before 10 s after the restart.
        assert a.handed_at + WINDOW < restarted + WINDOW - 3.0
        assert await tracker_db.pending_receipts.count_documents({}) == 0
    finally:
        await inbox.close()

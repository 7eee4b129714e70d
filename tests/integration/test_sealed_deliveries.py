"""Sealed deliveries on the real stack (issue 62, "a Runtime reads only its own deliveries"):
a Runtime that registers a key gets its Session's input and its function results sealed — the
records on ``runtime.deliveries`` carry none of the tenant's content, another reader of the
topic cannot open them, the Runtime opens them to exactly what was sent, and the receipt
tracker (Core's key) still matches the harness's receipt against the delivered result. Without
Core's seal key such a Runtime is never bound (docs/security.md, "Sealed deliveries")."""

from __future__ import annotations

import asyncio

import pytest

from shared import sealing
from shared.domain.receipts import REASON_APPLIED
from shared.sealing import KeyPair, SealError
from tests.support.calls import codex_receipt, only_application, open_call
from tests.support.kafka import read_records
from tests.support.system import Inbox, SystemFactory

pytestmark = pytest.mark.integration

INPUT_MARKER = "tenant-secret-input-5d1c"
RESULT_MARKER = "tenant-secret-result-93ab"


async def test_a_sealing_runtime_gets_its_content_and_the_topic_carries_none_of_it(
        make_system: SystemFactory) -> None:
    core = KeyPair.generate()
    system = await make_system(seal_key=core.private_text)
    rt = await system.runtime("codex", sealed=KeyPair.generate())
    inbox = Inbox(rt)
    try:
        r = await system.create("codex", f"please remember {INPUT_MARKER}")
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        start = await inbox.next(sid)
        assert start["messages"] == [{"role": "user", "content": [
            {"type": "input_text", "text": f"please remember {INPUT_MARKER}"}]}]

        call = await open_call(system, rt, inbox, output=RESULT_MARKER)
        assert call.delivery["content"] == [{"type": "input_text", "text": RESULT_MARKER}]
        await rt.observe(call.sid, codex_receipt(call), turn_id=call.delivery["turn_id"])
        app = await only_application(system, call)
        assert (app["state"], app["reason"]) == ("applied", REASON_APPLIED)
    finally:
        await inbox.close()

    on_topic = await read_records(system.settings, system.topics.runtime_deliveries,
                                  want=len(rt.raw), timeout=20)
    mine = [d for d in on_topic if d.get("runtime_id") == rt.runtime_id]
    assert len(mine) == len(rt.raw) == 3  # the two Sessions' starts and the result
    for raw in rt.raw:
        assert INPUT_MARKER.encode() not in raw and RESULT_MARKER.encode() not in raw
    for d in mine:
        assert sealing.is_sealed(d) and "messages" not in d and "content" not in d
        with pytest.raises(SealError):  # another Runtime's key opens nothing
            sealing.unseal(d, KeyPair.generate())


async def test_without_a_seal_key_core_never_binds_a_runtime_that_asks_for_sealing(
        make_system: SystemFactory) -> None:
    system = await make_system()
    rt = await system.runtime("codex", sealed=KeyPair.generate())
    r = await system.create("codex", f"please remember {INPUT_MARKER}")
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    await asyncio.sleep(3.0)
    assert rt.deliveries.empty() and rt.raw == []
    assert system.http is not None
    view = (await system.http.get(f"/v1/sessions/{sid}")).json()
    assert view["status"] == "waiting_for_runtime", view
    plain = await system.runtime("codex")  # one that does not ask takes it, in clear
    d = await plain.next_delivery()
    assert d["session_id"] == sid and "messages" in d

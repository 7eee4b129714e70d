"""Admission's Item tail (services/admission/tails.py): a record of a Session nobody in this
replica listens to is skipped by its key, never decoded; a listened one reaches its listeners as
the public Item, and an undecodable one of a listened Session goes to the DLQ."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from services.admission.tails import ItemTail
from shared import records
from shared.kafka import encode
from shared.settings import Settings

SID = "session_" + "c" * 32


@dataclass
class Rec:
    key: bytes | None
    value: bytes
    topic: str = "t.session.items"
    partition: int = 0
    offset: int = 0


class Dlq:
    def __init__(self) -> None:
        self.dead: list[Any] = []

    async def record(self, raw: Any, why: Any) -> None:
        self.dead.append((raw, why))


def tail() -> tuple[ItemTail, Dlq, list[bytes]]:
    dlq = Dlq()
    t = ItemTail(Settings(), "t.session.items", dlq)  # type: ignore[arg-type]
    decoded: list[bytes] = []
    real = t._decode

    def counting(raw: bytes) -> Any:
        decoded.append(raw)
        return real(raw)

    t._decode = counting  # type: ignore[method-assign]
    return t, dlq, decoded


def item_rec(sid: str) -> Rec:
    it = {"id": "item_1", "session_id": sid, "sequence": 1, "type": "turn", "turn_id": "turn_1",
          "state": "started", "created_at": "2026-01-01T00:00:00.000Z"}
    return Rec(sid.encode(), encode(records.item_record(it, "acme")))


async def test_an_item_nobody_listens_to_is_not_decoded() -> None:
    t, dlq, decoded = tail()
    await t._one(item_rec(SID))
    await t._one(Rec(SID.encode(), b"not json"))  # not this replica's to judge
    assert decoded == [] and dlq.dead == []


async def test_a_listened_item_reaches_its_listener_and_a_bad_one_the_dlq() -> None:
    t, dlq, decoded = tail()
    q = t.listen(SID)
    await t._one(item_rec("session_" + "d" * 32))  # another Session: skipped
    await t._one(item_rec(SID))
    got = await asyncio.wait_for(q.get(), 1)
    assert got["session_id"] == SID and got["sequence"] == 1 and "tenant" not in got
    assert len(decoded) == 1
    await t._one(Rec(SID.encode(), b"not json"))
    assert len(dlq.dead) == 1 and q.empty()
    t.unlisten(SID, q)
    await t._one(item_rec(SID))
    assert len(decoded) == 2  # (the bad record was decoded too) — and nothing after unlisten

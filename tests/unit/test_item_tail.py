"""Admission's tails read every record of their topic (no consumer group). Items and storage's
replies are keyed by what the tail dispatches on (``session_id``, ``request_id``; CONTRACT §2),
so a record nobody in this process waits for is not decoded — decoding every Item of the system
in every admission instance cost each instance CPU in proportion to the system's Item rate.
What someone waits for is decoded, dispatched and, when malformed, dead-lettered as before."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

from services.admission.tails import ItemTail, ReplyTail
from shared import records, typedrecords
from shared.domain.poison import Poison
from shared.settings import Settings

A = "session_" + "a" * 32
B = "session_" + "b" * 32


def _item(sid: str) -> bytes:
    return json.dumps(records.item_record(
        {"id": "item_" + "c" * 32, "session_id": sid, "sequence": 1, "type": "turn",
         "created_at": "2026-11-30T10:00:00Z", "turn_id": "turn_1", "state": "started",
         "reason": None}, "acme")).encode()


class Dlq:
    def __init__(self) -> None:
        self.dead: list[tuple[int, Poison]] = []

    async def record(self, r: Any, poison: Poison) -> None:
        self.dead.append((r.offset, poison))


def _feed(tail: Any, rows: list[tuple[bytes | None, bytes]]) -> None:
    async def go() -> None:
        for n, (key, value) in enumerate(rows):
            await tail._one(SimpleNamespace(topic=tail.topic, partition=0, offset=n, key=key,
                                            value=value))
    asyncio.run(go())


def test_items_of_sessions_nobody_listens_to_are_not_decoded(monkeypatch: Any) -> None:
    decoded: list[bytes] = []
    real = typedrecords.ITEM.decode
    monkeypatch.setattr(typedrecords.ITEM, "decode",
                        lambda raw: decoded.append(raw) or real(raw))
    dlq = Dlq()
    tail = ItemTail(Settings(), "t.session.items", dlq)  # type: ignore[arg-type]
    q = tail.listen(A)
    _feed(tail, [(B.encode(), _item(B)),        # nobody listens: skipped
                 (B.encode(), b"{not json"),    # nobody listens: skipped, not dead-lettered
                 (A.encode(), _item(A)),        # listened to: decoded, dispatched
                 (A.encode(), b"{not json"),    # listened to, malformed: dead-lettered
                 (None, _item(A)),              # keyless: decoded as before
                 (b"\xff\xfe", _item(A))])      # not UTF-8: decoded as before
    assert decoded == [_item(A), b"{not json", _item(A), _item(A)]
    assert [n for n, _ in dlq.dead] == [3]
    assert q.qsize() == 3 and q.get_nowait()["session_id"] == A


def test_with_no_listener_at_all_keyed_items_are_skipped() -> None:
    dlq = Dlq()
    tail = ItemTail(Settings(), "t.session.items", dlq)  # type: ignore[arg-type]
    _feed(tail, [(A.encode(), b"{not json"), (B.encode(), _item(B))])
    assert dlq.dead == []
    q = tail.listen(A)
    tail.unlisten(A, q)
    _feed(tail, [(A.encode(), b"{not json")])
    assert dlq.dead == [] and not tail.listeners


def test_replies_nobody_waits_for_are_not_decoded() -> None:
    dlq = Dlq()
    tail = ReplyTail(Settings(), "t.storage.replies", dlq)  # type: ignore[arg-type]
    fut = None

    async def go() -> None:
        nonlocal fut
        fut = tail.expect("req_1")
        for n, (key, value) in enumerate([
                (b"req_2", b"{not json"),
                (b"req_1", json.dumps({"schema": records.STORAGE_REPLY, "request_id": "req_1",
                                       "status": 201, "body": {}}).encode())]):
            await tail._one(SimpleNamespace(topic=tail.topic, partition=0, offset=n, key=key,
                                            value=value))
    asyncio.run(go())
    assert dlq.dead == []
    assert fut is not None and fut.done() and fut.result()["status"] == 201

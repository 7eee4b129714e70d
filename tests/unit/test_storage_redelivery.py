"""Storage after a failed batch (services/storage/app.py): the batch comes back — split over
several batches, interleaved differently — after the handler trusts its memory again, so every
record of the failed batch must still be checked against the journal when it comes (else it is
decided again at another sequence: the chaos store outage saw an Item published at a sequence
the store had given another decision). The handler is a stand-in that records what it is asked
to verify; no broker or store is contacted."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiokafka import TopicPartition

from services.storage.app import StorageService
from services.storage.handler import Outputs
from shared import records
from shared.settings import Settings
from tests.support.fakes.storage import Batch, MemoryBroker, MemoryConsumer, Rec

Json = dict[str, Any]


class Handler:
    def __init__(self) -> None:
        self.fail = True
        self.asked: list[tuple[list[str], frozenset[str]]] = []

    def invalidate(self) -> None:
        pass

    async def handle(self, inputs: list[Json], verify: frozenset[str] = frozenset(),
                     defer_rest: bool = False, current: frozenset[str] = frozenset(),
                     positions: dict[str, list[Any]] | None = None) -> Outputs:
        self.asked.append(([i["fact_id"] for i in inputs], verify))
        if self.fail:
            raise OSError("the store went away mid-write")
        return Outputs()


def fact(n: int) -> bytes:
    return json.dumps({"schema": records.FACT, "fact_id": f"f{n}", "session_id": "session_1",
                       "kind": "binding", "status": "bound"}).encode()


async def test_every_record_of_a_failed_batch_is_verified_when_it_comes_again() -> None:
    svc = StorageService(Settings(kafka_bootstrap_servers="127.0.0.1:1",
                                  mongodb_uri="mongodb://127.0.0.1:1/"))
    handler = Handler()
    svc.batches.handler = handler  # type: ignore[assignment]
    topic = svc.topics.core_facts
    tp = TopicPartition(topic, 0)
    consumer = MemoryConsumer(MemoryBroker(), {tp})
    batch = tuple(Rec(topic, 0, n, fact(n)) for n in range(10, 16))
    failed = Batch(batch, consumer)
    with pytest.raises(OSError):
        await svc.on_batch(None, failed)  # type: ignore[arg-type]
    assert failed.nacked  # rewound: its records come again (no framework rewinds for storage)
    handler.fail = False
    # redelivered in two parts; the first makes a real handler trusted again
    await svc.on_batch(None, Batch(batch[:2], consumer))  # type: ignore[arg-type]
    await svc.on_batch(None, Batch(batch[2:], consumer))  # type: ignore[arg-type]
    later = (Rec(topic, 0, 16, fact(16)),)
    await svc.on_batch(None, Batch(later, consumer))  # type: ignore[arg-type]
    assert handler.asked[1] == (["f10", "f11"], frozenset({"fact:f10", "fact:f11"}))
    assert handler.asked[2] == (["f12", "f13", "f14", "f15"],
                                frozenset({f"fact:f{n}" for n in range(12, 16)}))
    assert handler.asked[3] == (["f16"], frozenset())  # past the failed batch: trusted
    await svc.client.close()

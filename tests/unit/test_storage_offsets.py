"""Storage's offset commits behind its batches (services/storage/offsets.py): the next batch does
not wait for a batch's commit; one commit in flight, the ones finished meanwhile together, never
backwards, only partitions still owned; a failed commit logged, not raised; the rebalance
listener's commit after the one in flight; a failed batch rewound and not committed."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiokafka import TopicPartition

from services.storage.app import StorageService
from services.storage.batch import Rebalance
from services.storage.decided import DecidedState
from services.storage.handler import Outputs
from services.storage.offsets import OffsetCommits
from services.storage.sessionwriter import SessionWriter
from shared import records
from shared.settings import Settings
from tests.support.fakes.storage import Batch, Rec

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


class Consumer:
    """A consumer whose commits are held until ``release`` (``hold``) and recorded."""

    def __init__(self, owned: set[TopicPartition] | None = None) -> None:
        self.owned = owned if owned is not None else {A, B}
        self.commits: list[dict[TopicPartition, int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.started = asyncio.Event()
        self.fail: Exception | None = None

    def assignment(self) -> set[TopicPartition]:
        return set(self.owned)

    def hold(self) -> None:
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.started.set()
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        self.commits.append(dict(offsets))


async def test_a_batchs_offsets_are_committed_behind_it() -> None:
    c = Consumer()
    commits = OffsetCommits(lambda: c)
    commits.behind({A: 5})
    assert c.commits == []  # not awaited by the caller
    await commits.flush(1.0)
    assert c.commits == [{A: 5}]


async def test_batches_finished_during_a_commit_go_together_in_the_next_never_backwards() -> None:
    c = Consumer()
    c.hold()
    commits = OffsetCommits(lambda: c)
    commits.behind({A: 5})
    await c.started.wait()  # in flight
    commits.behind({A: 9, B: 2})
    commits.behind({A: 7, B: 4})  # an older offset of A does not move it back
    c.release()
    await commits.flush(1.0)
    assert c.commits == [{A: 5}, {A: 9, B: 4}]


async def test_only_partitions_still_owned_are_committed() -> None:
    c = Consumer(owned={A})
    commits = OffsetCommits(lambda: c)
    commits.behind({A: 3, B: 8})
    await commits.flush(1.0)
    assert c.commits == [{A: 3}]


async def test_dropped_partitions_are_not_committed_from_here() -> None:
    c = Consumer()
    c.hold()
    commits = OffsetCommits(lambda: c)
    commits.behind({A: 1})
    await c.started.wait()
    commits.behind({A: 4, B: 6})
    commits.drop([B])
    c.release()
    await commits.flush(1.0)
    assert c.commits == [{A: 1}, {A: 4}]


async def test_a_failed_commit_is_logged_and_the_next_goes_on() -> None:
    c = Consumer()
    c.fail = RuntimeError("the group rebalanced")
    commits = OffsetCommits(lambda: c)
    commits.behind({A: 2})
    await commits.flush(1.0)  # does not raise
    assert commits.task is not None and commits.task.done() and commits.task.exception() is None
    c.fail = None
    commits.behind({A: 3})
    await commits.flush(1.0)
    assert c.commits == [{A: 3}]


async def test_flush_waits_at_most_its_timeout() -> None:
    c = Consumer()
    c.hold()
    commits = OffsetCommits(lambda: c)
    commits.behind({A: 1})
    await commits.flush(0.05)  # the broker does not answer: returns anyway
    assert c.commits == []
    c.release()
    await commits.flush(1.0)
    assert c.commits == [{A: 1}]


async def test_the_listener_commits_the_revoked_partitions_after_the_commit_in_flight() -> None:
    c = Consumer()
    c.hold()
    decided = DecidedState(10)
    decided.assigned([A])
    decided.batch_done([(A, 4)])
    commits = OffsetCommits(lambda: c)
    commits.behind({A: 3})  # an older commit, still in flight when the group rebalances
    await c.started.wait()
    commits.behind({A: 5})

    class Marks:
        async def release(self, shards: Any) -> None:
            pass

    writer = SessionWriter(lambda states: asyncio.sleep(0))
    listener = Rebalance(asyncio.Lock(), decided, lambda: c, writer, Marks(),  # type: ignore[arg-type]
                         commits)
    revoking = asyncio.create_task(listener.on_partitions_revoked({A}))
    await asyncio.sleep(0.01)
    assert c.commits == []  # the listener waits for the commit in flight
    c.release()
    await revoking
    assert c.commits == [{A: 3}, {A: 5}]  # its own last; the waiting one was dropped


def fact(n: int) -> bytes:
    return json.dumps({"schema": records.FACT, "fact_id": f"f{n}", "session_id": "session_1",
                       "kind": "binding", "status": "bound"}).encode()


class Handler:
    def __init__(self) -> None:
        self.fail = False

    def invalidate(self) -> None:
        pass

    async def handle(self, inputs: list[dict[str, Any]], verify: frozenset[str] = frozenset(),
                     defer_rest: bool = False, current: frozenset[str] = frozenset(),
                     positions: dict[str, list[Any]] | None = None) -> Outputs:
        if self.fail:
            raise OSError("the store went away mid-write")
        return Outputs()


async def test_on_batch_returns_before_its_commit_and_a_failed_batch_is_rewound() -> None:
    svc = StorageService(Settings(kafka_bootstrap_servers="127.0.0.1:1",
                                  mongodb_uri="mongodb://127.0.0.1:1/"))
    handler = Handler()
    svc.batches.handler = handler  # type: ignore[assignment]
    tp = TopicPartition(svc.topics.core_facts, 0)
    c = Consumer(owned={tp})
    c.hold()
    batch = Batch(tuple(Rec(tp.topic, 0, n, fact(n)) for n in range(3)), c)
    await asyncio.wait_for(svc.on_batch(None, batch), 1.0)  # type: ignore[arg-type]
    assert not batch.nacked and c.commits == []  # returned; its commit is still held
    c.release()
    await svc.commits.flush(1.0)
    assert c.commits == [{tp: 3}]
    handler.fail = True
    failed = Batch((Rec(tp.topic, 0, 3, fact(3)),), c)
    with pytest.raises(OSError):
        await svc.on_batch(None, failed)  # type: ignore[arg-type]
    await svc.commits.flush(1.0)
    assert failed.nacked and c.commits == [{tp: 3}]  # rewound, and nothing past it committed
    await svc.client.close()

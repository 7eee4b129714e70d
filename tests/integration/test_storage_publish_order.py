"""First publications on ``session.items`` come in ``sequence`` order after a crash
(services/storage/publishorder.py), on the real store: a replayed record's Items go out only
after every earlier Item of its Session that may never have been acked — one decided by a
record at or past its partition's committed offset — whichever topic that record is on.

(Seen in the chaos suite, ``kill -9 storage``: the records of one Session come back from three
topics interleaved otherwise than they were decided, and Item 13 was published before 12.)"""

from __future__ import annotations

from typing import Any

import pytest

from services.storage.handler import StorageHandler, source_key
from services.storage.publishorder import PublishOrder
from shared.kafka import now_rfc3339
from tests.support.builders import admitted_create, admitted_event
from tests.support.system import System, SystemFactory

pytestmark = pytest.mark.integration

Json = dict[str, Any]


@pytest.fixture
async def core(make_system: SystemFactory) -> System:
    return await make_system(services=("storage",), http_port=None)


async def decide(core: System) -> tuple[str, list[Json], list[Json], list[Json]]:
    """A Session decided as a crashed storage left it: its create at offset 7 of the admitted
    topic, then a steer at offset 8 (Item 3), then another at offset 9 (Item 4), each journaled
    with its record's position. Returns the session id and each decision's Items."""
    handler = StorageHandler(core.storage.repo, now_rfc3339)
    create = admitted_create("order")
    sid = create["session_id"]
    steer1 = admitted_event(sid, "first steer")
    steer2 = admitted_event(sid, "second steer")
    made = []
    for rec, offset in ((create, 7), (steer1, 8), (steer2, 9)):
        out = await handler.handle([rec], positions={source_key(rec): ["admitted", 0, offset]})
        made.append(out.items)
    assert [[i["sequence"] for i in its] for its in made] == [[1, 2], [3], [4]]
    return sid, made[0], made[1], made[2]


def committed_at(offsets: dict[tuple[str, int], int]) -> Any:
    asked: list[tuple[str, int]] = []

    async def committed(topic: str, partition: int) -> int | None:
        asked.append((topic, partition))
        return offsets.get((topic, partition))

    committed.asked = asked  # type: ignore[attr-defined]
    return committed


def seqs(items: list[Json]) -> list[int]:
    return [int(i["sequence"]) for i in items]


async def test_a_replayed_item_waits_for_an_earlier_one_whose_record_is_not_committed(
        core: System) -> None:
    sid, _create, steer1, steer2 = await decide(core)
    order = PublishOrder(core.storage.repo)
    # the committed offset is 8: the record of Item 3 (offset 8) may never have been acked;
    # the create's (offset 7) was, and so was everything before it
    out = await order.complete(steer2, trusted=(), committed=committed_at({("admitted", 0): 8}))
    assert seqs(out) == [3, 4]
    assert out[0] == steer1[0]  # Item 3 as decided, the same id and body
    assert out[1] is steer2[0]


async def test_nothing_is_added_when_the_earlier_records_are_committed(core: System) -> None:
    sid, _create, _steer1, steer2 = await decide(core)
    order = PublishOrder(core.storage.repo)
    out = await order.complete(steer2, trusted=(), committed=committed_at({("admitted", 0): 9}))
    assert seqs(out) == [4]


async def test_the_walk_goes_down_to_the_first_committed_record(core: System) -> None:
    sid, create, steer1, steer2 = await decide(core)
    order = PublishOrder(core.storage.repo)
    # nothing committed on the partition: every Item may be unacked
    out = await order.complete(steer2, trusted=(), committed=committed_at({}))
    assert seqs(out) == [1, 2, 3, 4]


async def test_no_walk_where_nothing_can_be_missing(core: System) -> None:
    sid, create, steer1, steer2 = await decide(core)
    never = committed_at({})
    # the shard was handed over clean
    assert seqs(await PublishOrder(core.storage.repo).complete(
        steer2, trusted={sid}, committed=never)) == [4]
    # this replica saw Item 3 acked
    order = PublishOrder(core.storage.repo)
    order.saw_acked(steer1)
    assert seqs(await order.complete(steer2, trusted=(), committed=never)) == [4]
    # a Session's first Items; records handed in directly (no offsets)
    assert seqs(await PublishOrder(core.storage.repo).complete(
        create, trusted=(), committed=never)) == [1, 2]
    assert seqs(await PublishOrder(core.storage.repo).complete(
        steer2, trusted=(), committed=None)) == [4]
    assert never.asked == []


async def test_a_batch_s_own_items_go_in_sequence_order_once_each(core: System) -> None:
    """Two replays of one Session in one batch, fetched in the other order."""
    sid, create, steer1, steer2 = await decide(core)
    order = PublishOrder(core.storage.repo)
    out = await order.complete(steer2 + steer1 + steer2, trusted=(),
                               committed=committed_at({("admitted", 0): 8}))
    assert seqs(out) == [3, 4]

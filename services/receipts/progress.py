"""How far the tracker has read the observation stream, so a deadline is decided only once every
observation published before it has been read.

A receipt counts at its own Kafka timestamp, but it can only count once it is read. The
observations are consumed by their own consumer group; after a restart or a rebalance that
consumer may join, or catch up, seconds after a deadline has passed. Deciding the deadline then
would turn a call ``uncertain`` whose receipt is already on the topic.

``ReadUpTo`` is the pure part (``StreamReader`` the Kafka part): the assignment as the
rebalance listener reports it and, per assigned partition, the next offset not yet handled.
The reader turns it into a time: it notes ``t0``, asks the broker for the partitions' end
offsets, and once every assigned partition has been handled up to those offsets, every
observation appended before ``t0`` has been read — deadlines up to ``t0`` may be decided.
Without an assignment (joining, mid-rebalance) nothing is known and nothing is decided; a member
with an empty assignment has nothing to wait for.

The offsets are asked of a client of their own (``offsets``: a group-less consumer that never
fetches), not of the group's consumer: aiokafka sends a consumer's ListOffsets on the same
broker connection as its fetches, and the broker answers one request of a connection at a time,
so with nothing new to read the question waited behind the idle long-poll fetch (up to
``fetch_max_wait_ms``, 500 ms). Deadlines falling due during that round waited for the next one:
every verdict would come 0.5–1.3 s after its deadline."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from services.receipts.verdicts import RETRY_S
from shared.kafka import client_security
from shared.logging import get_logger
from shared.settings import Settings

log = get_logger(__name__)


class Offsets(Protocol):
    """Where the partitions' first and end offsets are asked (``AIOKafkaConsumer`` has both)."""

    def beginning_offsets(self, partitions: list[TopicPartition]
                          ) -> Awaitable[dict[TopicPartition, int]]: ...

    def end_offsets(self, partitions: list[TopicPartition]
                    ) -> Awaitable[dict[TopicPartition, int]]: ...


def offsets_client(settings: Settings) -> AIOKafkaConsumer:
    """The client the offsets are asked of (module doc), started by ``start_offsets``."""
    # group-less and never assigned: it never fetches, its connection answers at once
    return AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers,
                            enable_auto_commit=False,
                            client_id="session-core-receipts-offsets",
                            **client_security(settings))


async def start_offsets(offsets: AIOKafkaConsumer, topics: Iterable[str]) -> None:
    await offsets.start()
    # Its first question about a topic waits for the topic's metadata (a retry after
    # retry_backoff_ms, 100 ms): asked here, not at the first deadline.
    await offsets.end_offsets([TopicPartition(t, 0) for t in topics])


class ReadUpTo:
    __slots__ = ("assigned", "generation", "handled")

    def __init__(self) -> None:
        self.assigned: frozenset[int] | None = None  # None: no assignment known
        self.handled: dict[int, int] = {}  # partition → next offset not yet handled
        self.generation = 0  # changes with every assignment change

    def assign(self, partitions: Iterable[int]) -> None:
        """A new assignment. What was handled before is forgotten: while the partitions were
        elsewhere another member may have read on, so each starts again from its committed
        offset (``start_at``)."""
        self.assigned = frozenset(partitions)
        self.handled = {}
        self.generation += 1

    def revoke(self) -> None:
        self.assigned = None
        self.handled = {}
        self.generation += 1

    def start_at(self, partition: int, offset: int) -> None:
        """Everything before ``offset`` was handled already (the group's committed offset, or
        the log's start when nothing was committed)."""
        if self.assigned is not None and partition in self.assigned:
            self.handled[partition] = max(self.handled.get(partition, 0), offset)

    def handled_record(self, partition: int, offset: int) -> None:
        """The record at ``offset`` was handled (matched, kept, or dead-lettered)."""
        if self.assigned is not None and partition in self.assigned:
            self.handled[partition] = max(self.handled.get(partition, 0), offset + 1)

    def unknown(self) -> list[int]:
        """Assigned partitions whose starting offset is not known yet."""
        return sorted((self.assigned or frozenset()) - self.handled.keys())

    def reached(self, ends: Mapping[int, int]) -> bool:
        """Whether every assigned partition has been handled up to ``ends`` (end offsets taken
        after the assignment)."""
        if self.assigned is None:
            return False
        return all(p in self.handled and self.handled[p] >= ends.get(p, 0)
                   for p in self.assigned)


class StreamReader(ConsumerRebalanceListener):  # type: ignore[misc]
    """Moves a "read up to" time on when asked (``want``): notes ``t0``, takes the end offsets
    of the partitions its consumer holds, waits until the consumer has handled them, then
    reports ``t0`` (``moved``). A broker that does not answer leaves it where it is; an
    assignment change starts the round again. Also the consumer's rebalance listener, and told
    of every handled batch. ``offsets`` answers the offsets on a connection of its own (module
    doc); while it has none, the consumer is asked."""

    def __init__(self, topic: str, consumer: Callable[[], AIOKafkaConsumer | None],
                 want: asyncio.Event, moved: Callable[[float], None],
                 offsets: Callable[[], Offsets | None] = lambda: None) -> None:
        self.topic = topic
        self.consumer = consumer
        self.want = want
        self.moved = moved
        self.offsets = offsets
        self.read = ReadUpTo()
        self.changed = asyncio.Event()

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.read.revoke()
        self.changed.set()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.read.assign(tp.partition for tp in assigned if tp.topic == self.topic)
        self.changed.set()

    def handled(self, records: Iterable[Any]) -> None:
        """A batch was handled (dead-lettered records included: they are done with too)."""
        for r in records:
            self.read.handled_record(r.partition, r.offset)
        self.changed.set()

    async def run(self) -> None:
        while True:
            await self.want.wait()
            self.want.clear()
            while True:
                try:
                    t0 = time.time()
                    if await self._read_to_end():
                        break
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.warning("receipts.read_position_failed", exc_info=True)
                    await asyncio.sleep(RETRY_S)
            self.moved(t0)

    async def _read_to_end(self) -> bool:
        """``True`` once every observation appended before the call was handled; ``False``
        when the assignment changed meanwhile (the caller takes a new ``t0``)."""
        consumer = self.consumer()
        gen = self.read.generation
        if consumer is None or self.read.assigned is None:
            await self._changed(gen)
            return False
        ask: Offsets = self.offsets() or consumer
        unknown = [TopicPartition(self.topic, p) for p in self.read.unknown()]
        if unknown:
            firsts = await ask.beginning_offsets(unknown)
            for tp in unknown:
                committed = await consumer.committed(tp)
                log.debug("receipts.read_start", topic=tp.topic, partition=tp.partition,
                          committed=committed, first=firsts.get(tp, 0))
                # records before the log's start are gone: nothing there to wait for
                self.read.start_at(tp.partition, max(committed or 0, firsts.get(tp, 0)))
        tps = [TopicPartition(self.topic, p) for p in sorted(self.read.assigned or ())]
        if not tps:  # a member with no partitions has nothing to wait for
            return True
        ends = {tp.partition: off for tp, off in (await ask.end_offsets(tps)).items()}
        while self.read.generation == gen:
            if self.read.reached(ends):
                return True
            await self._changed(gen)
        return False

    async def _changed(self, gen: int) -> None:
        """Wait for a handled batch or an assignment change (with a ceiling, so a missed
        signal costs a second, not a hang)."""
        self.changed.clear()
        if self.read.generation != gen:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.changed.wait(), 1.0)

"""Storage's offset commits, behind its batches.

A batch's offsets may be committed once its records are durable in the store and its Items
acknowledged by the broker; nothing requires the next batch to wait for that commit. Kafka 4's
group coordinator holds each write to ``__consumer_offsets`` for
``group.coordinator.append.linger.ms`` (5 ms by default) before it answers, so a commit awaited
between batches cost every batch that much and more (docs/decisions.md, "Offsets committed
behind the batch"). ``OffsetCommits`` commits from a task of its own while the next
batch is written: one commit in flight at a time; the offsets of the batches finished
meanwhile go together in the next one, never backwards, and only for partitions the consumer
still owns.

A commit that is late or lost changes nothing that storage relies on: a partition's next owner
(or this replica after a restart) starts at the committed offset and finds what was written
past it in the journal (``DecidedState``: the assignment window, probed a batch at a time). The
rebalance listener waits for the commit in flight before it commits the revoked partitions'
written offsets itself (a late commit of older offsets would otherwise land after them), and a
clean stop commits what waits (``flush``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

from services.storage.decided import Partition
from shared.logging import get_logger

log = get_logger(__name__)


class OffsetCommits:
    def __init__(self, consumer: Callable[[], Any]) -> None:
        self.consumer = consumer  # the AIOKafkaConsumer (set before the first ``behind``)
        self.waiting: dict[Partition, int] = {}  # next offsets, not committed yet
        self.task: asyncio.Task[None] | None = None

    def behind(self, offsets: dict[Partition, int]) -> None:
        """Commit ``offsets`` (each partition's next offset) once the commit in flight, if
        any, has returned; a partition's offset only moves forward."""
        for tp, offset in offsets.items():
            if offset > self.waiting.get(tp, -1):
                self.waiting[tp] = offset
        if self.waiting and (self.task is None or self.task.done()):
            self.task = asyncio.create_task(self._run(), name="storage-offset-commits")

    async def _run(self) -> None:
        while self.waiting:
            consumer = self.consumer()
            offsets, self.waiting = self.waiting, {}
            owned = consumer.assignment()
            offsets = {tp: o for tp, o in offsets.items() if tp in owned}
            if not offsets:
                continue
            try:
                await consumer.commit(offsets)
            except Exception as exc:  # the next owner finds the records in the journal
                log.warning("storage.offset_commit_failed", error=repr(exc)[:200])

    def drop(self, partitions: Iterable[Partition]) -> None:
        """Forget the waiting offsets of partitions given up (the listener commits them)."""
        for tp in partitions:
            self.waiting.pop(tp, None)

    async def flush(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until what waits is committed or has failed."""
        task = self.task
        if task is None or task.done():
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), timeout_s)

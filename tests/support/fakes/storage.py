"""An in-memory stand-in for the MongoDB database storage writes to, so that storage's real code
(``StorageService.on_batch`` → ``BatchWriter`` → ``StorageHandler`` → ``StorageRepository``)
runs in milliseconds, and a broker stand-in (partition logs, committed offsets, what was
published).

``MemoryDatabase`` has the part of PyMongo's asynchronous collection API storage uses, with the
same meaning: ``_id`` unique in every collection, plus the unique indexes storage declares
(``items.source_key``); ``insert_many`` ordered (stops at the first duplicate) or not (inserts
all others), both raising ``BulkWriteError`` with code 11000 per duplicate; ``bulk_write`` of
``UpdateOne`` with ``$set`` / ``$setOnInsert`` / upsert; finds by ``_id`` equality only, and an
``explain`` that says so (as upstream FerretDB v1: ``shared.store.find_by_ids``).
``kill_after(n)`` lets the next ``n`` document writes through and fails every later one with
``AutoReconnect`` — the store killed in the middle of a command, which leaves a prefix of it
written — until ``revive()``."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from pymongo import UpdateOne
from pymongo.errors import AutoReconnect, BulkWriteError

Doc = dict[str, Any]
DUPLICATE_KEY = 11000
UNIQUE = {"items": ("source_key",)}  # besides ``_id``: shared/store.ensure_indexes


class MemoryCollection:
    def __init__(self, db: MemoryDatabase, name: str) -> None:
        self.db, self.name = db, name
        self.docs: dict[Any, Doc] = {}

    @property
    def database(self) -> MemoryDatabase:
        return self.db

    def _taken(self, doc: Doc) -> bool:
        if doc["_id"] in self.docs:
            return True
        return any(f in doc and any(d.get(f) == doc[f] for d in self.docs.values())
                   for f in UNIQUE.get(self.name, ()))

    async def find_one(self, filter: Doc, projection: Any = None) -> Doc | None:
        self.db.reachable()
        for doc in self.docs.values():
            if all(doc.get(k) == v for k, v in filter.items()):
                return copy.deepcopy(doc)
        return None

    async def insert_many(self, docs: list[Doc], ordered: bool = True) -> None:
        self.db.reachable()
        errors = []
        for n, doc in enumerate(docs):
            if self._taken(doc):
                errors.append({"index": n, "code": DUPLICATE_KEY, "errmsg": "duplicate key"})
                if ordered:
                    break
                continue
            self.db.write()
            self.docs[doc["_id"]] = copy.deepcopy(doc)
        if errors:
            raise BulkWriteError({"writeErrors": errors, "nInserted": len(docs) - len(errors)})

    async def bulk_write(self, ops: list[UpdateOne], ordered: bool = True) -> None:
        self.db.reachable()
        for op in ops:
            await self._update(op._filter, op._doc, upsert=bool(op._upsert))

    async def update_one(self, filter: Doc, update: Doc, upsert: bool = False) -> None:
        self.db.reachable()
        await self._update(filter, update, upsert=upsert)

    async def _update(self, filter: Doc, update: Doc, *, upsert: bool) -> None:
        doc = await self.find_one(filter)
        if doc is None:
            if not upsert:
                return
            doc = {k: v for k, v in filter.items() if not k.startswith("$")}
            doc.update(copy.deepcopy(update.get("$setOnInsert", {})))
        doc.update(copy.deepcopy(update.get("$set", {})))
        self.db.write()
        self.docs[doc["_id"]] = doc

    async def replace_one(self, filter: Doc, doc: Doc) -> None:
        held = await self.find_one(filter)
        if held is not None:
            self.db.write()
            self.docs[held["_id"]] = copy.deepcopy(doc)

    async def delete_one(self, filter: Doc) -> None:
        doc = await self.find_one(filter)
        if doc is not None:
            self.db.write()
            del self.docs[doc["_id"]]


class MemoryDatabase:
    def __init__(self) -> None:
        self.collections: dict[str, MemoryCollection] = {}
        self.budget: int | None = None  # document writes let through before the store dies

    def __getattr__(self, name: str) -> MemoryCollection:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.collections.setdefault(name, MemoryCollection(self, name))

    @property
    def client(self) -> MemoryDatabase:  # ``shared.store.ids_in_served`` keys its answer by it
        return self

    async def command(self, name: str, spec: Doc) -> Doc:
        """Only ``explain``, answered as upstream FerretDB v1 does for an ``_id`` ``$in``: not
        pushed down (so ``find_by_ids`` looks each key up by equality, all this fake serves)."""
        assert name == "explain", name
        return {"queryPlanner": {"Plan": ["detail=SCAN"]}, "filterPushdown": False, "ok": 1.0}

    def kill_after(self, writes: int) -> None:
        self.budget = writes

    def revive(self) -> None:
        self.budget = None

    def reachable(self) -> None:
        if self.budget is not None and self.budget <= 0:
            raise AutoReconnect("the store is gone")

    def write(self) -> None:
        self.reachable()
        if self.budget is not None:
            self.budget -= 1


@dataclass
class Rec:
    """A consumed record, as aiokafka's ``ConsumerRecord`` has it."""

    topic: str
    partition: int
    offset: int
    value: bytes
    key: bytes | None = None


@dataclass
class Batch:
    """What a FastStream batch subscriber hands ``on_batch``: the records and the consumer."""

    raw_message: tuple[Rec, ...]
    consumer: Any
    nacked: bool = False

    async def nack(self) -> None:
        """FastStream's rewind (each partition back to the batch's first record); the callers
        here keep the consumer's positions themselves and see that it was asked for."""
        self.nacked = True


@dataclass
class MemoryConsumer:
    """One replica's consumer: its assignment and the offsets it commits (into the broker)."""

    broker: MemoryBroker
    assigned: set[TopicPartition] = field(default_factory=set)

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.broker.committed.update(offsets)

    async def committed(self, tp: TopicPartition) -> int | None:
        """The group's committed offset (aiokafka's ``committed``: None where nothing is)."""
        return self.broker.committed.get(tp)


@dataclass
class MemoryBroker:
    """Partition logs, the group's committed offsets, and every record published."""

    logs: dict[TopicPartition, list[bytes]] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    published: list[tuple[str, Doc]] = field(default_factory=list)

    def append(self, tp: TopicPartition, record: Doc) -> None:
        self.logs.setdefault(tp, []).append(json.dumps(record).encode())

    def fetch(self, tp: TopicPartition, position: int, n: int) -> tuple[Rec, ...]:
        log = self.logs.get(tp, [])
        return tuple(Rec(tp.topic, tp.partition, o, log[o], b"k")
                     for o in range(position, min(position + n, len(log))))

    async def send(self, topic: str, value: bytes, key: bytes | None) -> Any:
        """The producer's ``send``: the returned future is the broker's ack (given at once)."""
        self.published.append((topic, json.loads(value)))
        acked = asyncio.get_running_loop().create_future()
        acked.set_result(None)
        return acked

    def on(self, topic: str) -> list[Doc]:
        return [r for t, r in self.published if t == topic]

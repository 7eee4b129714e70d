"""Storage's whole batch path — ``StorageService.on_batch`` with its real ``BatchWriter``,
``StorageHandler``, ``DecidedState``, ``StorageRepository`` and rebalance listener — over an
in-memory store and broker (``tests/support/fakes/storage.py``), driven by a hypothesis state
machine through random interleavings of what the chaos suite does on the real stack: records on
two topics of two partitions, batches of any size, lost offset commits, the store killed in the
middle of a write, a replica killed (-9: its memory gone, deferred Session writes lost) and
rebalances that move partitions between two replicas.

Checked throughout: every published Item is the Item the store holds at its place (never one
the store gave another decision), each Session's first publications come in sequence order
(services/storage/publishorder.py), and every answer to a request is the same each time. Checked
once everything is consumed: each admitted input is stored exactly once, each Session's Items
are numbered 1..n without a gap, and every stored Item was published."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any
from unittest.mock import patch

import pytest
from aiokafka import TopicPartition
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.admission.domain.validation import Limits, Stamp, validate_create, validate_event
from services.admission.domain.validation.admitted import AdmittedCreate
from services.storage.app import StorageService
from services.storage.batch import Rebalance
from services.storage.offsets import OffsetCommits
from shared import records
from shared.settings import Settings
from shared.storecodec import item_from_doc
from shared.storekeys import call_key, item_key
from shared.topics import topics_for
from tests.support.budget import examples
from tests.support.builders import message_event, tool_result
from tests.support.fakes.storage import Batch, MemoryBroker, MemoryConsumer, MemoryDatabase

Json = dict[str, Any]
PARTITIONS = (0, 1)
SLOTS = ("a", "b")
LIMITS = Limits()
SETTINGS = Settings(kafka_bootstrap_servers="127.0.0.1:1", mongodb_uri="mongodb://127.0.0.1:1/",
                    topic_partitions=len(PARTITIONS), storage_batch_max=4)


def _note(what: str) -> None:
    """A hypothesis event (coverage statistics) when under hypothesis; a scripted run prints."""
    try:
        event(what)
    except InvalidArgument:
        print(what)


class _NoClient:
    async def close(self) -> None:
        pass


class _MachineCommits(OffsetCommits):
    def behind(self, offsets: dict[Any, int]) -> None:
        pass


class Replica:
    """One storage process: the real service over the shared memory store, its consumer."""

    def __init__(self, db: MemoryDatabase, broker: MemoryBroker) -> None:
        with patch("shared.coreservice.make_client", lambda *a, **k: _NoClient()), \
                patch("shared.coreservice.database", lambda *a, **k: db), \
                patch("services.storage.app.make_producer", lambda *a, **k: None):
            self.svc = StorageService(SETTINGS)
        self.svc.batches.send = broker.send
        self.svc.batches.dlq.send = broker.send
        # the machine commits each batch's offsets itself, or loses the commit (``_consume``):
        # the service's commit behind the batch (``OffsetCommits``) is the machine's to make
        self.svc.commits = _MachineCommits(lambda: self.consumer)
        self.consumer = MemoryConsumer(broker)
        self.listener = Rebalance(self.svc.batch_lock, self.svc.decided, lambda: self.consumer,
                                  self.svc.repo.session_writer, self.svc.handovers,
                                  self.svc.commits)
        self.position: dict[TopicPartition, int] = {}


class StorageMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.db = MemoryDatabase()
        self.broker = MemoryBroker()
        self.t = topics_for(SETTINGS)
        self.replicas = {s: self.run(self._replica()) for s in SLOTS}
        self.owner = {p: SLOTS[p % len(SLOTS)] for p in PARTITIONS}
        self.run(self._rebalance(self.owner))
        self.sessions: list[str] = []
        self.calls: dict[str, list[str]] = {}
        self.admitted: list[Json] = []  # every admitted record appended to the logs
        self.said: list[str] = []  # every agent message appended to the logs
        self.n = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def _replica(self) -> Replica:
        r = Replica(self.db, self.broker)
        await r.svc.repo.mark_genesis()  # what ``StorageService.start`` does to the store
        return r

    def tps(self, p: int) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t in (self.t.session_admitted, self.t.core_facts)}

    async def _rebalance(self, owner: dict[int, str]) -> None:
        """Every member gives up everything, then takes its new assignment (eager protocol)."""
        for r in self.replicas.values():
            if r.consumer.assigned:
                await r.listener.on_partitions_revoked(r.consumer.assignment())
        for slot, r in self.replicas.items():
            mine = set().union(*(self.tps(p) for p, s in owner.items() if s == slot))
            r.consumer.assigned = mine
            r.position = {tp: self.broker.committed.get(tp, 0) for tp in mine}
            await r.listener.on_partitions_assigned(mine)
        self.owner = dict(owner)

    # ---- producers ----------------------------------------------------------------------
    def _next(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def _stamp(self, sid: str) -> Stamp:
        return Stamp(request_id=self._next("req"), session_id=sid, event_id=self._next("evt"),
                     admitted_at="2026-01-01T00:00:00Z", fingerprint=self._next("fp"),
                     tenant="default")

    def _append(self, topic: str, sid: str, record: Json) -> None:
        p = int(sid.rsplit("_", 1)[1]) % len(PARTITIONS)
        self.broker.append(TopicPartition(topic, p), record)
        if topic == self.t.session_admitted:
            self.admitted.append(record)

    @rule()
    def create_session(self) -> None:
        sid = f"session_{len(self.sessions)}"
        body = validate_create({"harness": "codex", "placement": "none", "input": "hi"}, LIMITS)
        assert isinstance(body, AdmittedCreate)
        self.sessions.append(sid)
        self.calls[sid] = []
        self._append(self.t.session_admitted, sid, body.admitted_record(self._stamp(sid)))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data())
    def send_message(self, data: st.DataObject) -> None:
        self.message(data.draw(st.sampled_from(self.sessions)))

    def message(self, sid: str) -> None:
        body = validate_event(message_event({"role": "user", "content": [
            {"type": "input_text", "text": self._next("text")}]}), "codex", "none", LIMITS)
        self._append(self.t.session_admitted, sid,
                     body.admitted_record(self._stamp(sid)))  # type: ignore[union-attr]

    @precondition(lambda self: self.sessions)
    @rule(data=st.data())
    def open_call(self, data: st.DataObject) -> None:
        """A function call the harness made (storage's fact from the observation)."""
        self.call(data.draw(st.sampled_from(self.sessions)))

    def call(self, sid: str) -> None:
        cid = self._next("call")
        self.calls[sid].append(cid)
        self._append(self.t.core_facts, sid, records.fact_record(
            sid, f"obs:{sid}:call:{cid}",
            {"kind": "function_call", "call_id": cid, "name": "f", "arguments": {},
             "native_ids": {}}))

    def _issued(self) -> list[tuple[str, str]]:
        """The calls storage has decided (admission admits a result only for one of these)."""
        return sorted((sid, cid) for sid, cids in self.calls.items() for cid in cids
                      if call_key(sid, cid) in self.db.calls.docs)

    @precondition(lambda self: self._issued())
    @rule(data=st.data())
    def send_result(self, data: st.DataObject) -> None:
        self.result(*data.draw(st.sampled_from(self._issued())))

    def result(self, sid: str, cid: str) -> None:
        body = validate_event(tool_result(call_id=cid, output="ok"), "codex", "none", LIMITS)
        self._append(self.t.session_admitted, sid,
                     body.admitted_record(self._stamp(sid)))  # type: ignore[union-attr]

    @precondition(lambda self: self.sessions)
    @rule(data=st.data())
    def end_turn(self, data: st.DataObject) -> None:
        """The harness ended the Session's latest Turn that storage published as started."""
        sid = data.draw(st.sampled_from(self.sessions))
        self.turn_ended(sid)

    def turn_ended(self, sid: str) -> None:
        tid = self._latest_turn(sid)
        if tid is not None:
            self._append(self.t.core_facts, sid, records.fact_record(
                sid, f"obs:{sid}:turn_end:{tid}",
                {"kind": "turn", "turn_id": tid, "state": "completed", "reason": None}))

    def _latest_turn(self, sid: str) -> str | None:
        turns = [r["turn_id"] for r in self.broker.on(self.t.session_stored)
                 if r["session_id"] == sid and r["kind"] == "start"]
        return turns[-1] if turns else None

    @precondition(lambda self: self.sessions)
    @rule(data=st.data())
    def agent_says(self, data: st.DataObject) -> None:
        self.say(data.draw(st.sampled_from(self.sessions)))

    def say(self, sid: str) -> None:
        """What the harness said in the Session's latest started Turn (storage's fact from the
        observation; no phase given: storage holds it until what follows decides it)."""
        tid = self._latest_turn(sid)
        if tid is None:
            return
        text = self._next("said")
        self.said.append(text)
        self._append(self.t.core_facts, sid, records.fact_record(
            sid, f"obs:{sid}:agent:{text}",
            {"kind": "agent_message", "turn_id": tid, "text": text, "phase": None}))

    # ---- the consumer ---------------------------------------------------------------------
    async def _consume(self, p: int, topics: list[str], n: int, commit: bool,
                       first: int | None = None) -> bool:
        """The owner of partition ``p`` fetches at most ``n`` records (``n`` ≤ the batch limit),
        at most ``first`` of them from the first topic (a fetch that returns a partition in
        part: its fetch size reached), and hands them to ``on_batch``. Afterwards the consumer
        commits its positions, as the service does behind a batch (``OffsetCommits``), unless
        ``commit`` is False: the commit lost or late (the process dies or the group rebalances
        before it) — the next batch's commit covers both."""
        r = self.replicas[self.owner[p]]
        caps = [n if first is None or i else first for i in range(len(topics))]
        raws = tuple(rec for t, cap in zip(topics, caps, strict=True)
                     for rec in self.broker.fetch(TopicPartition(t, p),
                                                  r.position[TopicPartition(t, p)], cap))[:n]
        if not raws:
            return True
        try:
            await r.svc.on_batch(None, Batch(raws, r.consumer))
        except Exception as exc:
            _note(f"batch failed: {type(exc).__name__}: {exc}"[:80])
            return False  # rewound (``on_batch`` nacks): it comes again from its first record
        for rec in raws:
            r.position[TopicPartition(rec.topic, p)] = rec.offset + 1
        if commit:
            await r.consumer.commit(dict(r.position))
        return True

    def _topics(self, data: st.DataObject) -> list[str]:
        return data.draw(st.sampled_from([[self.t.session_admitted], [self.t.core_facts],
                                          [self.t.session_admitted, self.t.core_facts]]))

    @rule(data=st.data(), p=st.sampled_from(PARTITIONS),
          n=st.integers(1, SETTINGS.storage_batch_max), commit=st.booleans(),
          first=st.none() | st.integers(1, SETTINGS.storage_batch_max - 1))
    def consume(self, data: st.DataObject, p: int, n: int, commit: bool,
                first: int | None) -> None:
        self.run(self._consume(p, self._topics(data), n, commit, first))

    @rule(data=st.data(), p=st.sampled_from(PARTITIONS),
          n=st.integers(1, SETTINGS.storage_batch_max), writes=st.integers(0, 12))
    def store_killed_mid_batch(self, data: st.DataObject, p: int, n: int, writes: int) -> None:
        self.killed_after(writes, p, self._topics(data), n, True)

    def killed_after(self, writes: int, p: int, topics: list[str], n: int, commit: bool) -> bool:
        """``_consume`` with the store killed after ``writes`` writes (revived afterwards)."""
        self.db.kill_after(writes)
        try:
            return bool(self.run(self._consume(p, topics, n, commit)))
        finally:
            self.db.revive()

    @rule(slot=st.sampled_from(SLOTS))
    def replica_killed(self, slot: str) -> None:
        """kill -9: nothing of the replica's memory survives; the group rebalances."""
        self.replicas[slot] = self.run(self._replica())
        self.run(self._rebalance(self.owner))

    @rule(owner=st.tuples(*[st.sampled_from(SLOTS) for _ in PARTITIONS]))
    def rebalance(self, owner: tuple[str, ...]) -> None:
        self.run(self._rebalance(dict(zip(PARTITIONS, owner, strict=True))))

    # ---- what must hold -------------------------------------------------------------------
    def _stored(self) -> dict[str, Json]:
        return {k: item_from_doc(d) for k, d in self.db.items.docs.items()}

    @invariant()
    def published_items_are_the_stored_ones(self) -> None:
        stored = self._stored()
        for rec in self.broker.on(self.t.session_items):
            item = {k: v for k, v in rec.items() if k not in ("schema", "tenant")}
            assert stored.get(item_key(item["session_id"], item["sequence"])) == item

    @invariant()
    def first_publications_come_in_sequence_order(self) -> None:
        """CONTRACT: session.items carries a Session's Items in sequence order; after a crash
        an Item may come again (same id), but each first publication is the next sequence."""
        first: dict[str, int] = {}
        for rec in self.broker.on(self.t.session_items):
            sid, seq = rec["session_id"], rec["sequence"]
            if seq > first.get(sid, 0):
                assert seq == first.get(sid, 0) + 1, (sid, first.get(sid, 0), seq)
                first[sid] = seq

    @invariant()
    def every_answer_to_a_request_is_the_same(self) -> None:
        seen: dict[str, str] = {}
        for rec in self.broker.on(self.t.storage_replies):
            got = json.dumps({"status": rec["status"], "body": rec["body"]}, sort_keys=True)
            assert seen.setdefault(rec["request_id"], got) == got

    def teardown(self) -> None:
        try:
            self.run(self._settle())
            self._check_exactly_once()
            _note(f"Items stored: {min(len(self.db.items.docs) // 10 * 10, 50)}+")
        finally:
            self.loop.close()

    async def _settle(self) -> None:
        await self._rebalance(self.owner)
        await self._consume_all()
        for sid in self.sessions:  # every held agent message is its Turn's answer now
            self.turn_ended(sid)
        await self._consume_all()
        for r in self.replicas.values():
            await r.svc.repo.session_writer.drain(5)

    async def _consume_all(self) -> None:
        for _ in range(500):
            behind = [(p, tp.topic) for p in PARTITIONS for tp in self.tps(p)
                      if self.replicas[self.owner[p]].position[tp]
                      < len(self.broker.logs.get(tp, []))]
            if not behind:
                break
            for p, topic in behind:  # a failed batch (a stale decision) is retried
                await self._consume(p, [topic], SETTINGS.storage_batch_max, True)
        else:
            raise AssertionError("the logs were not consumed to their ends")

    def _check_exactly_once(self) -> None:
        stored = self._stored()
        by_session: dict[str, list[int]] = {}
        for item in stored.values():
            by_session.setdefault(item["session_id"], []).append(item["sequence"])
        for sid, seqs in by_session.items():
            assert sorted(seqs) == list(range(1, len(seqs) + 1)), (sid, sorted(seqs))
        messages = Counter(i["event_id"] for i in stored.values()
                           if i["type"] == "message" and i.get("role") == "user")
        for rec in self.admitted:
            if rec.get("event_type") != records.EV_TOOL_RESULT:
                assert messages[rec["event_id"]] == 1, (rec["event_id"], messages)
        agent = Counter("".join(p["text"] for p in i["content"]) for i in stored.values()
                        if i["type"] == "message" and i.get("role") == "agent")
        for text in self.said:  # every Turn has ended: none is still held
            assert agent[text] == 1, (text, agent[text])
        answered = {r["request_id"] for r in self.broker.on(self.t.storage_replies)}
        assert {r["request_id"] for r in self.admitted} <= answered
        published = {item_key(r["session_id"], r["sequence"])
                     for r in self.broker.on(self.t.session_items)}
        assert set(stored) <= published


def test_a_replay_after_a_later_fact_never_moves_the_session_back() -> None:
    """The sequence the machine rarely builds: a message decided, its commit lost; the replica
    killed; its successor rolls the Session forward, decides a function call from the other
    topic, then gets the message again — replayed — with the next message in the same batch.
    Setting the Session back to the replay's state would decide the next message at the call's
    sequence, for ever refused as stale."""
    m = StorageMachine()
    admitted, facts = [m.t.session_admitted], [m.t.core_facts]
    m.create_session()  # session_0, partition 0, owned by replica "a"
    assert m.run(m._consume(0, admitted, 1, True))
    m.message("session_0")
    m.message("session_0")
    m.call("session_0")
    assert m.run(m._consume(0, admitted, 1, False))  # decided; the commit lost
    m.replica_killed("a")
    assert m.run(m._consume(0, facts, 1, True))
    assert m.run(m._consume(0, admitted, 2, True))
    m.published_items_are_the_stored_ones()
    m.first_publications_come_in_sequence_order()
    m.every_answer_to_a_request_is_the_same()
    m.teardown()


def test_batches_past_several_lost_commits_are_replayed_after_a_kill() -> None:
    """Commits that fail are logged by the framework, not raised: a replica can decide several
    batches past the committed offset. Here the last of them dies after its journal entries and
    the function result's submission were written, before anything was published, and the
    replica is killed. Its successor must replay that batch from the journal: decided again,
    the result meets its own submission, is answered as a repeat, and its Item is never
    published."""
    m = StorageMachine()
    admitted, facts = [m.t.session_admitted], [m.t.core_facts]
    m.create_session()  # session_0, partition 0, owned by replica "a"
    assert m.run(m._consume(0, admitted, 1, True))
    m.call("session_0")
    assert m.run(m._consume(0, facts, 1, True))
    for _ in range(SETTINGS.storage_batch_max):
        m.message("session_0")
    assert m.run(m._consume(0, admitted, SETTINGS.storage_batch_max, False))  # commit lost
    (sid, cid), = m._issued()
    m.result(sid, cid)
    m.create_session()  # session_1, partition 1
    m.create_session()  # session_2, partition 0: written at once, after the submission
    m.db.kill_after(6)  # Items (3), journal (2), the submission; not the new Session
    assert not m.run(m._consume(0, admitted, 2, True))
    m.db.revive()
    m.replica_killed("a")
    m.teardown()


def test_an_item_never_acked_is_published_before_a_later_one_from_the_other_topic() -> None:
    """The chaos suite's ``kill -9 storage`` row saw ``[…, 11, 13, 12, …]`` on session.items:
    a message decided and journaled, never published (the broker failed its send), the replica
    killed; its successor reads the other topic first and decides a function call
    at the next sequence. The call must not be first published before the message it follows
    (services/storage/publishorder.py)."""
    m = StorageMachine()
    admitted, facts = [m.t.session_admitted], [m.t.core_facts]
    m.create_session()  # session_0, partition 0, owned by replica "a"
    assert m.run(m._consume(0, admitted, 1, True))
    m.message("session_0")

    async def broker_away(topic: str, value: bytes, key: bytes | None) -> Any:
        raise OSError("the broker went away")

    batches = m.replicas["a"].svc.batches
    with patch.object(batches, "send", broker_away):  # its Item and journal entry written
        assert not m.run(m._consume(0, admitted, 1, True))
    assert [r["sequence"] for r in m.broker.on(m.t.session_items)] == [1, 2]
    m.replica_killed("a")
    m.call("session_0")
    assert m.run(m._consume(0, facts, 1, True))
    m.first_publications_come_in_sequence_order()
    assert m.run(m._consume(0, admitted, 1, True))
    m.first_publications_come_in_sequence_order()
    m.published_items_are_the_stored_ones()
    m.teardown()


def test_a_held_agent_message_survives_a_kill_before_its_session_was_written() -> None:
    """The chaos suite's ``kill -9 storage`` rows saw an agent message the harness printed
    never become an Item. Holding it (its phase undecided) changes the Session and adds no
    Item; the store killed after its journal entry, before the Session document: the successor
    must not decide the next record — from the other topic — on the Session without it, or the
    Turn's end finds nothing held. Killed after each write in turn."""
    for writes in range(8):
        m = StorageMachine()
        admitted, facts = [m.t.session_admitted], [m.t.core_facts]
        m.create_session()  # session_0, partition 0, owned by replica "a"; its Turn started
        assert m.run(m._consume(0, admitted, 1, True))
        m.say("session_0")
        m.killed_after(writes, 0, facts, 1, False)
        m.replica_killed("a")
        m.message("session_0")  # a steer, read first
        assert m.run(m._consume(0, admitted, 1, True))
        m.teardown()  # the Turn ends: the message is its answer, once


@pytest.mark.parametrize("handed_over", [False, True])
def test_a_probe_brings_the_document_up_not_the_broker(handed_over: bool) -> None:
    """CI's run of the machine at the full budget: a batch (a Session created, a message) died
    after its Items and journal were written, before anything was published. The next batch
    replayed the creation alone — its probe brought the Session's document up to the message's
    Item 3 — and the one after decided a function call at 4 from the other topic. The document
    was current, so 4 went out with no look for earlier Items never acked: ``[1, 2, 4]``. The
    same when the shard is handed over before the call: its mark said clean. Killed after each
    write in turn."""
    for writes in range(10):
        m = StorageMachine()
        admitted, facts = [m.t.session_admitted], [m.t.core_facts]
        m.create_session()  # session_0, partition 0, owned by replica "a"
        m.message("session_0")
        m.killed_after(writes, 0, admitted, 2, True)
        assert m.run(m._consume(0, admitted, 1, True))
        if handed_over:  # the shard's mark must not say clean: the successor looks too
            m.rebalance(("b", "b"))
        m.call("session_0")
        assert m.run(m._consume(0, facts, 1, True))
        m.first_publications_come_in_sequence_order()
        m.published_items_are_the_stored_ones()
        m.teardown()


def test_a_gap_between_a_batchs_own_items_is_filled() -> None:
    """As above, but the replayed creation and the function call come in one batch (the fetch
    returned the admitted partition in part): the batch's own Items of the Session are 1, 2 and
    4 — the message's Item 3, never acked, goes out between them."""
    for writes in range(10):
        m = StorageMachine()
        both = [m.t.session_admitted, m.t.core_facts]
        m.create_session()  # session_0, partition 0, owned by replica "a"
        m.message("session_0")
        m.killed_after(writes, 0, [m.t.session_admitted], 2, True)
        m.call("session_0")
        assert m.run(m._consume(0, both, 2, True, first=1))
        m.first_publications_come_in_sequence_order()
        m.published_items_are_the_stored_ones()
        m.teardown()


StorageMachine.TestCase.settings = settings(
    max_examples=examples(200), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
# At the full budget (``make test-slow``: 200 examples of up to 50 steps) a slow 2-core machine
# ran it past the suite's 300 s timeout, which cut it in the middle of an example (reported as
# Hypothesis's FlakyStrategyDefinition). Its own bound is 900 s; the everyday run is a fifth.
test_storage_machine = pytest.mark.timeout(900)(StorageMachine.TestCase)


def test_a_batch_of_behind_batch_records_holds_the_session_writer_back() -> None:
    """Storage's batch path tells the Session writer each batch's size: a batch of
    ``BEHIND_BATCH`` records holds it back (services/storage/sessionwriter.py), a smaller one
    does not."""
    m = StorageMachine()
    admitted = [m.t.session_admitted]
    with patch("services.storage.sessionwriter.BEHIND_BATCH", 2):
        writer = m.replicas["a"].svc.repo.session_writer
        m.create_session()  # session_0, partition 0, owned by replica "a"
        assert m.run(m._consume(0, admitted, 1, True))
        assert not writer._held(m.loop.time())
        m.message("session_0")
        m.message("session_0")
        assert m.run(m._consume(0, admitted, 2, True))
        assert writer._held(m.loop.time())
    m.teardown()

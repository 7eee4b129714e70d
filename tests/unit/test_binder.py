"""The dispatcher's binder on in-memory fakes (``tests/support/fakes/dispatcher.py``): the rules
of binding, delivery, gone Runtimes and broker outages, in milliseconds, and a hypothesis state
machine that drives random registrations, heartbeats, outages, inputs, Turn ends and
redeliveries and checks after every step what the chaos suite checks on the real stack:

* an input is delivered only to a Runtime whose reported capabilities cover it (harness,
  placement, bridge protocol, images in the content), and which was not gone;
* every accepted input is delivered, waiting in the queue, or its Turn failed with a reason —
  never dropped;
* one running Turn per Session: a Turn not ended is carried by at most one Runtime, and a new
  Turn is delivered only after the previous one ended."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from services.dispatcher.binder import Binder
from services.dispatcher.domain.binding import CLAUDE_BRIDGE_PROTOCOLS, RuntimeInfo
from services.dispatcher.registry import ReadingClock
from shared.domain import wire
from shared.storekeys import verdict_fact_id
from tests.support.budget import examples
from tests.support.builders import text
from tests.support.fakes.dispatcher import (
    FakeClock,
    FakeOutbox,
    FakeRegistry,
    FakeRepository,
    PublishFailed,
)

Doc = dict[str, Any]
HEARTBEAT_S = 10.0
WAIT_S = 30.0
IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}


def runtime(runtime_id: str, at: datetime, *, harness: str = "codex",
            placements: tuple[str, ...] = ("none",), message_images: bool = True,
            function_result_images: bool = True, status: str = "ready",
            bridge_protocol: int | None = 3) -> RuntimeInfo:
    return RuntimeInfo(runtime_id=runtime_id, harness=harness, placements=frozenset(placements),
                       bridge_protocol=bridge_protocol, message_images=message_images,
                       function_result_images=function_result_images,
                       status=status,  # type: ignore[arg-type]
                       heartbeat_at=at)


_ids = itertools.count()


def stored(sid: str, turn: str, kind: str, *, harness: str = "codex", placement: str = "none",
           images: bool = False, created_with_images: bool = False,
           ids: Iterator[int] = _ids) -> Doc:
    n = next(ids)
    rec: Doc = {"schema": "session.stored/1", "session_id": sid,
                "event_id": f"evt_{n:032x}", "turn_id": turn, "kind": kind,
                "harness": harness, "placement": placement, "has_images": created_with_images}
    if kind == "function_result":
        rec.update(call_id=f"call_{n}", name="f",
                   submission={"success": True, "output": [text("r")] + ([IMAGE] if images
                                                                         else [])})
    else:
        rec["messages"] = [{"role": "user", "content": [text("m")] + ([IMAGE] if images
                                                                      else [])}]
    return rec


class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.repo = FakeRepository()
        self.registry = FakeRegistry(self.clock)
        self.out = FakeOutbox()
        self.binder, self.replica = (
            Binder(self.repo, self.registry, self.out, heartbeat_timeout_s=HEARTBEAT_S,
                   binding_wait_timeout_s=WAIT_S, clock=self.clock) for _ in range(2))

    def register(self, runtime_id: str, **kw: Any) -> RuntimeInfo:
        rt = runtime(runtime_id, self.clock.at(), **kw)
        self.registry.register(rt)
        return rt

    def delivered(self, runtime_id: str | None = None) -> list[Doc]:
        return [m for rid, m in self.out.deliveries if runtime_id in (None, rid)]


@pytest.fixture
def world() -> World:
    return World()


async def test_a_session_binds_to_a_capable_runtime_and_gets_its_input(world: World) -> None:
    world.register("rt_blind", message_images=False)
    world.register("rt_seeing")
    rec = stored("s1", "t1", "start", images=True, created_with_images=True)
    await world.binder.accept(rec)
    assert [(rid, m["kind"]) for rid, m in world.out.deliveries] == [("rt_seeing", "start")]
    assert world.out.deliveries[0][1]["delivery_id"] == wire.delivery_id(rec["event_id"])


def test_ready_runtimes_age_out_with_their_heartbeats_and_feed_the_metric(world: World) -> None:
    """``session_core_runtimes_ready`` per harness: a Runtime whose heartbeats stop leaves the
    count once the heartbeat timeout passes, though no record arrives (what the
    SessionCoreNoReadyRuntime alert watches)."""
    from prometheus_client import REGISTRY

    from shared.metrics import set_ready_runtimes

    def gauge(harness: str) -> float | None:
        return REGISTRY.get_sample_value("session_core_runtimes_ready", {"harness": harness})

    world.register("rt_a")
    world.register("rt_b", status="draining")
    world.register("rt_c", harness="claude_code", bridge_protocol=3)
    assert world.binder.ready_runtimes() == {"codex": 1, "claude_code": 1, "minimax_code": 0}
    set_ready_runtimes(world.binder.ready_runtimes())
    assert (gauge("codex"), gauge("claude_code"), gauge("minimax_code")) == (1, 1, 0)
    world.clock.advance(HEARTBEAT_S / 2)
    world.register("rt_c", harness="claude_code", bridge_protocol=3)  # rt_c beats, rt_a not
    world.clock.advance(HEARTBEAT_S / 2 + 1)
    set_ready_runtimes(world.binder.ready_runtimes())
    assert (gauge("codex"), gauge("claude_code"), gauge("minimax_code")) == (0, 1, 0)


async def test_a_refused_function_result_gets_the_calls_one_verdict_id(world: World) -> None:
    """The dispatcher's verdict for a result no Runtime can take uses the same fact id as the
    receipt tracker's (one verdict per call: a second replays the first in storage's journal,
    and ``GET …/tool_results`` finds the verdict under that id)."""
    world.register("rt_a", function_result_images=False)
    await world.binder.accept(stored("s1", "t1", "start"))
    rec = stored("s1", "t1", "function_result", images=True)
    await world.binder.accept(rec)
    verdicts = [(fid, b) for sid, fid, b in world.out.facts if b.get("kind") == "application"]
    assert [fid for fid, _ in verdicts] == [verdict_fact_id("s1", rec["call_id"])]
    assert verdicts[0][1]["state"] == "failed"
    assert "function_result_images_unsupported" in verdicts[0][1]["reason"]
    # the result is not delivered; the Runtime is told to end the Turn that waits for it
    assert [m["kind"] for _, m in world.out.deliveries] == ["start", "interrupt"]


async def test_a_gone_runtime_fails_its_running_turn_and_the_session_moves(world: World) -> None:
    world.register("rt_a")
    await world.binder.accept(stored("s1", "t1", "start"))
    world.register("rt_b")
    world.clock.advance(HEARTBEAT_S / 2)
    world.register("rt_b")  # rt_a stops heartbeating
    world.clock.advance(HEARTBEAT_S / 2 + 1)
    world.register("rt_b")
    await world.binder.sweep()
    assert [f["reason"] for f in world.out.turn_failures("s1")] == ["runtime rt_a is gone"]
    assert world.repo.bindings["s1"]["runtime_id"] == "rt_b"


async def test_a_failed_publish_while_unbinding_is_retried_by_the_next_sweep(
        world: World) -> None:
    """The Turn of a gone Runtime must fail even if the first attempt to say so cannot be
    published (the broker refuses it): the next sweep tries again."""
    world.register("rt_a")
    await world.binder.accept(stored("s1", "t1", "start"))
    world.clock.advance(HEARTBEAT_S + 1)
    world.out.fail_facts = 1
    with pytest.raises(PublishFailed):
        await world.binder.sweep()
    await world.binder.sweep()
    assert [f["reason"] for f in world.out.turn_failures("s1")] == ["runtime rt_a is gone"]


async def test_no_heartbeat_ages_while_the_registry_is_unread(world: World) -> None:
    """A broker outage: the registry is not read for three heartbeat timeouts. No Runtime is
    gone during it; after it every Runtime has one whole timeout to be heard again, and one
    that is not is gone after that — counted from the moment reading resumed."""
    world.register("rt_live")
    world.register("rt_dies", harness="claude_code")
    await world.binder.accept(stored("s_live", "t1", "start"))
    await world.binder.accept(stored("s_dies", "t2", "start", harness="claude_code"))
    world.registry.blind = True
    for _ in range(30):  # the outage: nothing read, the sweeper goes on
        world.clock.advance(1.0)
        await world.binder.sweep()
    assert world.out.turn_failures("s_live") == world.out.turn_failures("s_dies") == []
    world.registry.blind = False  # the broker is back
    await world.binder.sweep()
    back = world.clock.now
    world.clock.advance(HEARTBEAT_S - 1)
    world.register("rt_live")
    await world.binder.sweep()
    assert world.out.turn_failures("s_live") == world.out.turn_failures("s_dies") == []
    world.clock.advance(2.0)
    await world.binder.sweep()
    assert world.clock.now - back > HEARTBEAT_S
    assert [f["reason"] for f in world.out.turn_failures("s_dies")] == [
        "runtime rt_dies is gone"]
    assert world.out.turn_failures("s_live") == []
    assert world.repo.bindings["s_live"]["runtime_id"] == "rt_live"


async def test_a_runtime_dead_before_the_dispatcher_started_is_gone_at_once(
        world: World) -> None:
    """What the registry reads when the dispatcher starts is judged by its own time."""
    world.register("rt_old")
    world.clock.advance(HEARTBEAT_S * 10)
    fresh = FakeRegistry(world.clock)
    fresh.runtimes = dict(world.registry.runtimes)
    world.binder.registry = fresh
    assert world.binder.live("rt_old") is None


async def test_two_replicas_binding_one_session_at_once_agree_on_its_runtime(
        world: World) -> None:
    """Each replica spreads Sessions by its own count of them, so two replicas may choose
    different Runtimes for one waiting Session at the same moment; only one may win, and the
    other hands the Session's input to the winner."""
    rec = stored("s1", "t1", "start")
    await world.binder.accept(rec)  # no Runtime yet: it waits
    world.register("rt_a")
    world.register("rt_b")
    world.binder.load = {"rt_a": 0, "rt_b": 5}
    world.replica.load = {"rt_a": 5, "rt_b": 0}
    await asyncio.gather(world.binder.sweep(), world.replica.sweep())
    assert {rid for rid, _m in world.out.deliveries} == {world.repo.bindings["s1"]["runtime_id"]}
    assert len({m["delivery_id"] for m in world.delivered()}) == 1


async def test_a_redelivered_waiting_record_is_queued_once(world: World) -> None:
    rec = stored("s1", "t1", "start")
    await world.binder.accept(rec)
    await world.binder.accept(rec)
    assert len(await world.repo.pending("s1")) == 1
    world.register("rt_a")
    await world.binder.sweep()
    assert [m["delivery_id"] for m in world.delivered()] == [wire.delivery_id(rec["event_id"])]


async def test_a_record_redelivered_after_the_store_failed_mid_delivery_keeps_its_turn(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen in the chaos suite (FerretDB kill -9): a new Session's start was queued, bound and
    delivered, and the store went away before its queue entry was removed. Redelivered after the
    outage, the record found its own entry still queued while its Runtime was alive and bound —
    and the dispatcher took that for a gone Runtime: it failed the running Turn ("the bound
    runtime is gone") that the Runtime then completed. A live bound Runtime gets the queue
    (again: the Runtime drops a delivery id it has seen); only a gone one fails the Turn."""
    world.register("rt_a")
    rec = stored("s1", "t1", "start")
    gone = world.repo.unqueue

    async def store_away(pending_id: str) -> None:
        raise ConnectionError("the store went away")

    monkeypatch.setattr(world.repo, "unqueue", store_away)
    with pytest.raises(ConnectionError):
        await world.binder.accept(rec)
    monkeypatch.setattr(world.repo, "unqueue", gone)
    await world.binder.accept(rec)  # the redelivery
    assert world.out.turn_failures("s1") == []
    assert [(rid, m["delivery_id"]) for rid, m in world.out.deliveries] == [
        ("rt_a", wire.delivery_id(rec["event_id"]))] * 2
    assert await world.repo.pending("s1") == []
    assert world.repo.bindings["s1"]["runtime_id"] == "rt_a"


async def test_the_bind_timeout_counts_from_when_storage_published_the_input(
        world: World) -> None:
    """A dispatcher that is behind reads an input long after storage published it: the wait
    counts from the record's timestamp (``stored_at``), so the first sweep after the read fails
    an input that already waited past the bind timeout; a fresh one keeps waiting."""
    old = {**stored("s_old", "t1", "start"), "stored_at": world.clock.now - WAIT_S - 1}
    fresh = {**stored("s_new", "t2", "start"), "stored_at": world.clock.now - 1}
    future = {**stored("s_skew", "t3", "start"), "stored_at": world.clock.now + 3600}
    for rec in (old, fresh, future):
        await world.binder.accept(rec)
    await world.binder.sweep()
    failed = {sid: b for sid, _fid, b in world.out.facts
              if b.get("kind") == "turn" and b.get("state") == "failed"}
    assert set(failed) == {"s_old"}
    assert f"no eligible Runtime within {WAIT_S:g} s" in failed["s_old"]["reason"]
    world.clock.advance(WAIT_S)  # a producer clock ahead counts from the read, no later
    await world.binder.sweep()
    failed = {sid for sid, _fid, b in world.out.facts
              if b.get("kind") == "turn" and b.get("state") == "failed"}
    assert failed == {"s_old", "s_new"}
    world.clock.advance(1.5)
    await world.binder.sweep()
    failed = {sid for sid, _fid, b in world.out.facts
              if b.get("kind") == "turn" and b.get("state") == "failed"}
    assert failed == {"s_old", "s_new", "s_skew"}


def test_the_reading_clock_grants_a_timeout_only_after_a_stretch_without_reading() -> None:
    clock = ReadingClock(fresh_s=1.0)
    assert clock.floor(100.0) == 100.0  # nothing read yet: nothing ages
    clock.caught_up(100.0)
    assert clock.floor(100.5) is None  # the first read is not a resumption
    clock.caught_up(100.8)
    assert clock.floor(101.5) is None
    assert clock.floor(102.0) == 102.0  # 1.2 s without a caught-up poll: not reading
    clock.caught_up(130.0)
    assert clock.floor(130.2) == 130.0  # heartbeats count from the resumption
    clock.caught_up(129.0)  # an older poll answer changes nothing
    assert clock.caught_up_at == 130.0


# ---- the state machine --------------------------------------------------------------------

RUNTIME_IDS = [f"rt_{i}" for i in range(5)]


def capabilities(i: int) -> dict[str, Any]:
    """Fixed per Runtime (a registration's capabilities do not change): a mix of harnesses,
    placements, image support and one Claude bridge Core does not speak."""
    return {"harness": ("codex", "claude_code")[i % 2],
            "placements": ("none",) if i % 3 else ("none", "self_hosted"),
            "message_images": i % 3 != 1, "function_result_images": i % 4 != 2,
            "bridge_protocol": 2 if i == 3 else 3}


class Session:
    def __init__(self, sid: str, harness: str, placement: str) -> None:
        self.sid, self.harness, self.placement = sid, harness, placement
        self.turn: str | None = None
        self.running = False
        self.ended: set[str] = set()


class BinderMachine(RuleBasedStateMachine):
    sessions = Bundle("sessions")

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.w = World()
        self.accepted: dict[str, Doc] = {}  # event_id → record
        self.by_session: dict[str, Session] = {}
        self.checked = 0  # deliveries checked against the registry so far
        self.facts_seen = 0
        # ids of this example alone: a replayed example meets the same ids, so the same
        # hash orders, and fails the same way
        self.ids = itertools.count()

    def teardown(self) -> None:
        self.loop.close()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def _accept(self, rec: Doc) -> None:
        self.accepted[rec["event_id"]] = rec
        self.run(self.w.binder.accept(rec))
        self._after()

    def _after(self) -> None:
        """Check the new deliveries against the registry as it is now, and learn the Turns the
        binder failed (as storage would apply them)."""
        for rid, m in self.w.out.deliveries[self.checked:]:
            rt = self.w.registry.runtimes.get(rid)
            s = self.by_session[m["session_id"]]
            assert rt is not None and rt.status != "gone", (rid, m)
            assert rt.harness == s.harness and s.placement in rt.placements, (rt, m)
            if rt.harness == "claude_code":
                assert rt.bridge_protocol in CLAUDE_BRIDGE_PROTOCOLS, rt
            if m["kind"] == "interrupt":  # ends a Turn this Runtime carries: no content
                assert s.turn is not None and m["turn_id"] in s.ended | {s.turn}, (m, s.turn)
            elif m["kind"] == "function_result":
                assert rt.function_result_images or not wire.has_images(m["content"]), (rt, m)
            else:
                assert rt.message_images or not wire.messages_have_images(m["messages"]), (rt, m)
        self.checked = len(self.w.out.deliveries)
        for sid, _fid, body in self.w.out.facts[self.facts_seen:]:
            if body.get("kind") == "turn" and body.get("state") == "failed":
                assert body.get("reason"), body
                s = self.by_session[sid]
                s.ended.add(body["turn_id"])
                if body["turn_id"] == s.turn:
                    s.running = False
        self.facts_seen = len(self.w.out.facts)

    # ---- Runtimes and the broker ------------------------------------------------------
    @initialize()
    def runtimes_register(self) -> None:
        for i, rid in enumerate(RUNTIME_IDS):
            self.w.register(rid, **capabilities(i))

    @rule(i=st.integers(0, len(RUNTIME_IDS) - 1),
          status=st.sampled_from(["ready", "ready", "ready", "draining", "gone"]))
    def heartbeat(self, i: int, status: str) -> None:
        self.w.register(RUNTIME_IDS[i], status=status, **capabilities(i))
        self._after()

    @rule(seconds=st.sampled_from([0.5, 2.0, 6.0, 11.0, 31.0]),
          alive=st.sets(st.integers(0, len(RUNTIME_IDS) - 1)))
    def time_passes(self, seconds: float, alive: set[int]) -> None:
        """Time passes; the Runtimes in ``alive`` go on heartbeating (the others are silent)."""
        self.w.clock.advance(seconds)
        for i in sorted(alive):
            self.w.register(RUNTIME_IDS[i], **capabilities(i))
        self._after()

    @rule()
    def broker_goes(self) -> None:
        self.w.registry.blind = True

    @rule()
    def broker_returns(self) -> None:
        self.w.registry.blind = False

    @rule()
    def sweep(self) -> None:
        self.run(self.w.binder.sweep())
        self._after()

    # ---- Sessions and their input -------------------------------------------------------
    @rule(target=sessions, harness=st.sampled_from(["codex", "claude_code"]),
          placement=st.sampled_from(["none", "self_hosted"]), images=st.booleans())
    def create(self, harness: str, placement: str, images: bool) -> Session:
        s = Session(f"s_{next(self.ids)}", harness, placement)
        self.by_session[s.sid] = s
        s.turn, s.running = f"t_{next(self.ids)}", True
        self._accept(stored(s.sid, s.turn, "start", harness=harness, placement=placement,
                            images=images, created_with_images=images, ids=self.ids))
        return s

    @rule(s=sessions, images=st.booleans())
    def message(self, s: Session, images: bool) -> None:
        if not s.running:
            s.turn, s.running = f"t_{next(self.ids)}", True
            kind = "start"
        else:
            kind = "steer"
        assert s.turn is not None
        self._accept(stored(s.sid, s.turn, kind, harness=s.harness, placement=s.placement,
                            images=images, ids=self.ids))

    @rule(s=sessions, images=st.booleans(), sweeper_first=st.booleans())
    def two_replicas_at_once(self, s: Session, images: bool, sweeper_first: bool) -> None:
        """A message handled by its partition's owner while the other replica sweeps (the
        sweeper's lease and a partition are held by different replicas): both may bind the
        Session in the same moment."""
        if not s.running:
            s.turn, s.running = f"t_{next(self.ids)}", True
            kind = "start"
        else:
            kind = "steer"
        assert s.turn is not None
        rec = stored(s.sid, s.turn, kind, harness=s.harness, placement=s.placement,
                     images=images, ids=self.ids)
        self.accepted[rec["event_id"]] = rec
        both = [self.w.binder.accept(rec), self.w.replica.sweep()]

        async def together() -> None:
            await asyncio.gather(*(both[::-1] if sweeper_first else both))
        self.run(together())
        self._after()

    @rule(s=sessions, images=st.booleans())
    def function_result(self, s: Session, images: bool) -> None:
        if s.running and s.turn is not None:
            self._accept(stored(s.sid, s.turn, "function_result", harness=s.harness,
                                placement=s.placement, images=images, ids=self.ids))

    @rule(s=sessions, code=st.sampled_from([wire.REFUSAL_TURN_ENDED, "harness_error"]))
    def runtime_refuses(self, s: Session, code: str) -> None:
        """The Runtime refuses the Session's last delivery: a steer after the harness ended the
        Turn is handed over again by storage (a fact); any other refusal fails the Turn."""
        mine = [m for _rid, m in self.w.out.deliveries if m["session_id"] == s.sid]
        if not mine:
            return
        m = mine[-1]
        self.run(self.w.binder.observe({
            "schema": "runtime.observation/1", "session_id": s.sid, "turn_id": m["turn_id"],
            "runtime_id": m["runtime_id"], "native": None,
            "refusal": {"delivery_id": m["delivery_id"], "kind": m["kind"], "code": code,
                        "reason": f"refused ({code})"}}))
        self._after()

    @rule(s=sessions)
    def turn_ends(self, s: Session) -> None:
        if s.running and s.turn is not None:
            s.running = False
            s.ended.add(s.turn)

    @precondition(lambda self: bool(self.accepted))
    @rule(data=st.data())
    def redelivery(self, data: st.DataObject) -> None:
        """Records handed to the binder again (a crash before their offsets were committed):
        the partition is read again from the committed offset, so a record comes again with
        every record after it, in their order — never an old record alone after newer ones
        (a Session's last record is always the last it is handed)."""
        events = list(self.accepted)
        first = data.draw(st.integers(0, len(events) - 1))
        for event in events[first:]:
            self._accept(self.accepted[event])

    # ---- invariants ---------------------------------------------------------------------
    @invariant()
    def every_input_is_delivered_waiting_or_failed(self) -> None:
        delivered = {m["delivery_id"] for _rid, m in self.w.out.deliveries}
        failed = {fid for _sid, fid, b in self.w.out.facts
                  if b.get("kind") == "turn" and b.get("state") == "failed"}
        waiting = {p["record"]["event_id"] for p in self.w.repo.pending_docs.values()}
        for event, rec in self.accepted.items():
            assert (wire.delivery_id(event) in delivered or event in waiting
                    or f"dsp:refuse:{event}:turn" in failed), ("dropped", rec)

    @invariant()
    def one_running_turn_per_session(self) -> None:
        carriers: dict[tuple[str, str], set[str]] = {}
        for rid, m in self.w.out.deliveries:
            carriers.setdefault((m["session_id"], m["turn_id"]), set()).add(rid)
        for s in self.by_session.values():
            unended = {t for (sid, t) in carriers if sid == s.sid and t not in s.ended}
            assert len(unended) <= 1, (s.sid, unended)
            for t in unended:
                assert len(carriers[(s.sid, t)]) == 1, (s.sid, t, carriers[(s.sid, t)])


BinderMachine.TestCase.settings = settings(
    max_examples=examples(300), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestBinderMachine = BinderMachine.TestCase

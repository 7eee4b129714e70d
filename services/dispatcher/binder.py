"""The dispatcher's rules: bind Sessions to Runtimes by reported capability, deliver their input
over the Core–Runtime wire, rebind from gone Runtimes, fail what cannot be delivered.

A Runtime that cannot take an input fails the Turn (a ``turn`` fact with the reason, written
by storage), and a Runtime that runs that Turn is told to end it natively (``interrupt``);
content is never dropped or stripped. Every input is either delivered, queued
for an eligible Runtime, or its Turn fails with a reason. The binder reaches the world through
three ports — the repository, the registry's view of the Runtimes, the outbox (facts to
storage, deliveries to Runtimes) — so its rules run the same on the real stack and on the
in-memory fakes of the unit tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from services.dispatcher.domain.binding import (
    RuntimeInfo,
    check_delivery,
    choose,
    is_alive,
    ready_by_harness,
)
from shared import records, sealing, tracing
from shared.domain import wire
from shared.logging import get_logger
from shared.metrics import DISPATCH_BINDINGS, DISPATCH_DELIVERIES, DISPATCH_REFUSALS
from shared.sealing import KeyPair
from shared.storekeys import verdict_fact_id

log = get_logger(__name__)
Doc = dict[str, Any]
WAITING = "waiting_for_runtime"


class Repository(Protocol):
    async def binding(self, session_id: str) -> Doc | None: ...
    async def create_binding(self, doc: Doc) -> Doc: ...
    async def update_binding(self, session_id: str, fields: Mapping[str, Any]) -> None: ...
    async def swap_runtime(self, session_id: str, read: str | None,
                           fields: Mapping[str, Any]) -> bool: ...
    async def bound_to(self, runtime_id: str) -> list[Doc]: ...
    async def load(self) -> dict[str, int]: ...
    async def pending_count(self, session_id: str) -> int: ...
    async def queue(self, session_id: str, event_id: str, record: Doc, n: int,
                    queued_at: float, trace: Mapping[str, str] | None = None) -> None: ...
    async def pending(self, session_id: str) -> list[Doc]: ...
    async def unqueue(self, pending_id: str) -> None: ...
    async def waiting_sessions(self) -> set[str]: ...


class Registry(Protocol):
    def seen(self, now: datetime) -> Mapping[str, RuntimeInfo]: ...


class Outbox(Protocol):
    async def publish_fact(self, session_id: str, fact_id: str, body: Doc) -> None: ...
    async def deliver(self, runtime_id: str, message: Doc) -> None: ...


class Binder:
    def __init__(self, repo: Repository, registry: Registry, out: Outbox, *,
                 heartbeat_timeout_s: float, binding_wait_timeout_s: float,
                 clock: Callable[[], float], seal_key: str | None = None,
                 require_sealing: bool = False) -> None:
        if require_sealing and not seal_key:
            raise ValueError("SESSION_CORE_REQUIRE_SEALED_DELIVERIES needs SESSION_CORE_SEAL_KEY: "
                             "without it no Runtime could ever be bound")
        self.repo = repo
        # Core's public key, the second recipient of every sealed delivery (the receipt
        # tracker opens it); None: no seal key, a Runtime that asks for sealing is not bound
        self.core_key = KeyPair.from_private(seal_key).public if seal_key else None
        self.require_sealing = require_sealing  # only Runtimes that ask for sealing are bound
        self.registry = registry
        self.out = out
        self.heartbeat_timeout = timedelta(seconds=heartbeat_timeout_s)
        self.binding_wait_timeout_s = binding_wait_timeout_s
        self.clock = clock
        self.load: dict[str, int] | None = None
        self.cleared: set[str] = set()  # dead Runtimes whose Sessions were all unbound
        # live Runtime → the incarnation whose Sessions were checked for Turns an earlier
        # incarnation ran (``restarts``)
        self.checked: dict[str, str] = {}
        self._last_place = 0

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def _place(self) -> int:
        """A queue position: arrival order (nanoseconds), never the same twice here."""
        self._last_place = max(self._last_place + 1, int(self.clock() * 1e9))
        return self._last_place

    async def publish_fact(self, session_id: str, fact_id: str, **body: Any) -> None:
        await self.out.publish_fact(session_id, f"dsp:{fact_id}", body)

    # ---- a stored input -------------------------------------------------------------------
    async def accept(self, rec: Doc) -> None:
        sid = rec["session_id"]
        b = await self.repo.binding(sid)
        if b is None:
            b = await self.repo.create_binding({
                "_id": sid, "harness": rec["harness"], "placement": rec["placement"],
                "needs_images": bool(rec.get("has_images")), "runtime_id": None,
                "status": WAITING, "waiting_since": self.clock(), "turn_id": None})
        images = rec["kind"] != "function_result" and wire.messages_have_images(
            rec.get("messages") or ())
        if images and not b.get("needs_images"):
            # Images that arrive after creation: from now on the Session needs a Runtime that
            # reports message images (for a re-bind below, and after its Runtime is gone).
            await self.repo.update_binding(sid, {"needs_images": True})
            b = {**b, "needs_images": True}
        pending = await self.repo.pending_count(sid)
        rt = self.live(b.get("runtime_id"))
        if rt is not None and images and rec["kind"] == "start" and not rt.message_images:
            # A new Turn that opens with images on a Runtime without message images: re-bind
            # before the Turn starts (nothing runs natively yet). A steer into a running Turn
            # cannot move; it fails the Turn at delivery (check_delivery).
            log.info("dispatcher.rebind_for_images", session_id=sid, runtime_id=rt.runtime_id)
            await self.release(b, "the next Turn carries images")
            b = {**b, "runtime_id": None, "status": WAITING}
            rt = None
        if pending == 0 and rt is not None:
            if b.get("announced") != rt.runtime_id:  # (try_bind)
                await self.announce(sid, rt.runtime_id)
            await self.deliver(b, rt, rec)
            return
        # A record redelivered after a crash finds its own entry: it keeps its first place.
        # Its wait is counted from when storage published it (``stored_at``, the record's
        # Kafka timestamp), not from when this replica read it: a dispatcher that is behind
        # fails an input that waited past the bind timeout as soon as it reads it.
        # It keeps the trace it came in (tracing on: the ``process`` span current here), so a
        # delivery made later — by the sweeper, after a bind wait or a rebind — goes on in it.
        now = self.clock()
        await self.repo.queue(sid, rec["event_id"], rec, self._place(),
                              min(float(rec.get("stored_at") or now), now), tracing.carrier())
        if rt is None and b.get("status") != WAITING:
            await self.unbind(b, "the bound runtime is gone")
        # A live bound Runtime with a queue: input left there by a crash or a store outage
        # between a delivery and its unqueue (the store killed in between) — delivered
        # again in order (the Runtime drops a delivery id it has seen), nothing failed.
        await self.try_bind(sid)

    async def not_bound(self, rec: Doc) -> str | None:
        """Why a refusal cannot be taken — its Runtime is not the one its Session is bound to
        (the binding is written before any delivery, so the bound Runtime's refusal always
        finds it) — or None. Other observations do not concern the dispatcher."""
        sid = rec.get("session_id")
        if not isinstance(rec.get("refusal"), dict) or not isinstance(sid, str):
            return None
        b = await self.repo.binding(sid)
        bound_to = b.get("runtime_id") if b is not None else None
        if bound_to is not None and bound_to == rec.get("runtime_id"):
            return None
        return (f"runtime {rec.get('runtime_id')} is not the Runtime Session {sid} is bound to "
                f"({bound_to or 'none'}): its refusal is not taken")

    async def observe(self, rec: Doc) -> None:
        """A Runtime's observation: only its refusals concern the dispatcher (the caller has
        set aside those of a Runtime the Session is not bound to: ``not_bound``)."""
        refusal = rec.get("refusal")
        sid = rec.get("session_id")
        if not isinstance(refusal, dict) or not isinstance(sid, str):
            return
        did = str(refusal.get("delivery_id"))
        event_id = wire.event_of_delivery(did)
        if (refusal.get("kind") == "steer" and event_id is not None
                and refusal.get("code") == wire.REFUSAL_TURN_ENDED):
            # The harness ended the Turn before the steer reached it: storage hands the
            # messages over again (next Turn), never drops them.
            await self.publish_fact(sid, f"refusal:{did}:steer", kind=records.FACT_STEER_REFUSED,
                                    turn_id=rec.get("turn_id"), event_id=event_id, delivery_id=did)
            return
        if refusal.get("code") == wire.REFUSAL_TURN_BOUND_EXCEEDED:
            # The bridge refused a steer past the per-Turn bound and ends its native Turn:
            # Core's Turn ends from that observed end (storage), not from here — a function
            # call the native Turn makes before its end is still its own.
            log.info("dispatcher.turn_bound_refused", session_id=sid,
                     turn_id=rec.get("turn_id"), delivery_id=did)
            return
        reason = f"the runtime refused the input: {refusal.get('reason')}"
        await self.publish_fact(sid, f"refusal:{refusal.get('delivery_id')}:turn", kind="turn",
                                turn_id=rec.get("turn_id"), state="failed", reason=reason)

    # ---- Runtimes -----------------------------------------------------------------------
    def live(self, runtime_id: str | None) -> RuntimeInfo | None:
        if runtime_id is None:
            return None
        now = self._now()
        rt = self.registry.seen(now).get(runtime_id)
        if rt is None or not is_alive(rt, now, self.heartbeat_timeout):
            return None
        return rt

    def ready_runtimes(self) -> dict[str, int]:
        """Runtimes that could take a new Session now, per harness (the metric)."""
        now = self._now()
        return ready_by_harness(self.registry.seen(now).values(), now, self.heartbeat_timeout)

    async def _load(self) -> dict[str, int]:
        """Sessions bound per Runtime: counted from the store once, then kept up to date as
        this replica binds and unbinds (a heuristic for spreading, not a correctness rule)."""
        if self.load is None:
            self.load = await self.repo.load()
        return self.load

    def _count(self, runtime_id: str | None, delta: int) -> None:
        if self.load is not None and runtime_id is not None:
            self.load[runtime_id] = max(0, self.load.get(runtime_id, 0) + delta)

    # ---- binding --------------------------------------------------------------------------
    async def try_bind(self, sid: str) -> bool:
        """Bind the Session if it can be, then hand over what waits for it, in order."""
        b = await self.repo.binding(sid)
        if b is None:
            return False
        rt = self.live(b.get("runtime_id"))
        if rt is None:
            now = self._now()
            rt = choose(
                self.registry.seen(now).values(), await self._load(),
                harness=b["harness"], placement=b["placement"],
                needs_message_images=b["needs_images"], now=now,
                heartbeat_timeout=self.heartbeat_timeout, session_id=sid,
                can_seal=self.core_key is not None, must_seal=self.require_sealing,
            )
            if rt is None:
                if b.get("status") != WAITING or not b.get("announced_wait"):
                    await self.repo.update_binding(sid, {"status": WAITING,
                                                         "announced_wait": True})
                    await self.publish_fact(sid, f"wait:{sid}:{b.get('waiting_since')}",
                                            kind="binding", status=WAITING, runtime_id=None,
                                            reason=why_waiting(b))
                return False
            if await self.claim(sid, b.get("runtime_id"), rt):
                self._count(rt.runtime_id, +1)
                log.info("dispatcher.bound", session_id=sid, runtime_id=rt.runtime_id)
                DISPATCH_BINDINGS.labels(rt.harness).inc()
                await self.announce(sid, rt.runtime_id)
            else:  # another replica bound it first: its Runtime is the Session's
                b = await self.repo.binding(sid) or b
                rt = self.live(b.get("runtime_id"))
                log.info("dispatcher.bound_elsewhere", session_id=sid,
                         runtime_id=b.get("runtime_id"))
                if rt is None:
                    return False
        elif b.get("announced") != rt.runtime_id:
            # bound, but its binding fact was never published (the broker away between the
            # claim and the fact): storage takes the Runtime's observations only once it
            # knows the binding, so it is published before anything is delivered
            await self.announce(sid, rt.runtime_id)
        for p in await self.repo.pending(sid):
            b = await self.repo.binding(sid) or b
            with tracing.within(tracing.kept(p.get("trace"))):  # the input's own trace
                await self.deliver(b, rt, p["record"])
            await self.repo.unqueue(p["_id"])
        return True

    async def announce(self, sid: str, runtime_id: str) -> None:
        """Tell storage the Session's Runtime (a ``binding`` fact), then remember it was told:
        storage accepts a Session's observations only from the Runtime such a fact names,
        and this fact is acked before any delivery to that Runtime."""
        await self.publish_fact(sid, f"bind:{sid}:{runtime_id}:{self._place()}",
                                kind="binding", status="bound", runtime_id=runtime_id,
                                reason=None)
        await self.repo.update_binding(sid, {"announced": runtime_id})

    async def claim(self, sid: str, read: str | None, rt: RuntimeInfo) -> bool:
        """Bind ``sid`` to ``rt`` only if its binding still names the Runtime this replica read
        (``read``; None: unbound). The sweeper's replica and the owner of the Session's
        partition may bind the same waiting Session at the same moment; without the
        compare-and-set each could choose another Runtime, and both would deliver the
        Session's input: two native Turns."""
        return await self.repo.swap_runtime(sid, read, {
            "runtime_id": rt.runtime_id, "status": "bound", "bound_at": self.clock(),
            "announced_wait": False, "announced": None})

    async def release(self, b: Doc, why: str) -> None:
        """Let go of the Session's Runtime between Turns (nothing to fail): the binding waits
        for an eligible Runtime again; ``try_bind`` chooses it."""
        if await self.repo.swap_runtime(b["_id"], b.get("runtime_id"), self._waiting()):
            self._count(b.get("runtime_id"), -1)
        log.info("dispatcher.released", session_id=b["_id"], runtime_id=b.get("runtime_id"),
                 why=why)

    async def unbind(self, b: Doc, reason: str) -> None:
        """The Session's Runtime is gone: the Turn it carried fails, the binding waits. The
        failure is published before the binding changes, so a publish that fails leaves the
        binding as it was, to be found and unbound again."""
        sid = b["_id"]
        if b.get("turn_id"):
            await self.publish_fact(sid, f"gone:{b['turn_id']}:{b.get('runtime_id')}", kind="turn",
                                    turn_id=b["turn_id"], state="failed", reason=reason)
        self._count(b.get("runtime_id"), -1)
        await self.repo.update_binding(sid, self._waiting())

    def _waiting(self) -> Doc:
        return {"runtime_id": None, "status": WAITING, "waiting_since": self.clock(),
                "announced_wait": False}

    # ---- delivery -------------------------------------------------------------------------
    async def fail_input(self, rec: Doc, reason: str) -> None:
        sid = rec["session_id"]
        log.warning("dispatcher.turn_failed", session_id=sid, reason=reason)
        DISPATCH_REFUSALS.labels(rec["kind"]).inc()
        if rec["kind"] == "function_result":
            # the call's one verdict id, as the receipt tracker's (shared/storekeys.py)
            await self.out.publish_fact(sid, verdict_fact_id(sid, rec["call_id"]), {
                "kind": "application", "call_id": rec["call_id"], "state": "failed",
                "reason": reason})
        await self.publish_fact(sid, f"refuse:{rec['event_id']}:turn", kind="turn",
                                turn_id=rec.get("turn_id"), state="failed", reason=reason)
        await self.interrupt(rec, reason)

    async def interrupt(self, rec: Doc, reason: str) -> None:
        """``rec`` failed a Turn that may be running natively: a steer or a function result
        belongs to the Turn the Session's Runtime carries. That Runtime is told to end the
        native Turn (``kind: "interrupt"``), so the harness makes no later call on a Turn Core
        shows as failed; its end, when forwarded, is for an ended Turn and writes nothing.
        Sent after the failure is published. No live bound Runtime, or one carrying another
        Turn by now: nothing runs this Turn, nothing is sent."""
        turn_id = rec.get("turn_id")
        if rec["kind"] not in ("steer", "function_result") or not turn_id:
            return
        b = await self.repo.binding(rec["session_id"])
        rt = self.live(b.get("runtime_id")) if b is not None else None
        if b is None or rt is None or b.get("turn_id") != turn_id:
            return
        await self.send(rt, wire.interrupt_delivery(
            delivery_id=wire.interrupt_delivery_id(rec["event_id"]),
            runtime_id=rt.runtime_id, session_id=rec["session_id"], turn_id=turn_id,
            reason=reason))
        DISPATCH_DELIVERIES.labels("interrupt").inc()
        log.info("dispatcher.interrupted", session_id=rec["session_id"],
                 runtime_id=rt.runtime_id, turn_id=turn_id)

    async def deliver(self, b: Doc, rt: RuntimeInfo, rec: Doc) -> None:
        sid, kind = rec["session_id"], rec["kind"]
        did = rec.get("delivery_id") or wire.delivery_id(rec["event_id"])
        if kind == "function_result":
            sub = rec["submission"]
            msg = wire.function_result_delivery(
                delivery_id=did, runtime_id=rt.runtime_id, session_id=sid,
                turn_id=rec.get("turn_id") or "", call_id=rec["call_id"],
                name=rec.get("name", ""), success=sub["success"], output=sub.get("output"),
                error=sub.get("error"), fields_present=rec.get("fields_present"),
            )
            images = wire.has_images(msg["content"])
        else:
            msg = wire.message_delivery(
                delivery_id=did, runtime_id=rt.runtime_id, session_id=sid,
                turn_id=rec["turn_id"], kind=kind, messages=rec["messages"],
            )
            images = wire.messages_have_images(rec["messages"])
            # The per-Turn user-message bound (Claude Code: 64) is the bridge's to enforce: a
            # steer past it is delivered, and the bridge refuses it whole and ends its native
            # Turn (docs/runtime-boundary.md). Failing it here would leave the native Turn
            # running, its later function calls attributed to a Turn Core shows as failed.
            # The binding remembers the Turn it carries: a gone Runtime fails that Turn.
            # So does the Runtime process it went to (``incarnation``): a restart under the
            # same id lost the Turns the process ran (``restarts``).
            await self.repo.update_binding(sid, {"turn_id": rec["turn_id"],
                                                 "incarnation": rt.incarnation})
        refusal = check_delivery(rt, kind, images)
        if refusal is None and rt.sealed_key is not None and self.core_key is None:
            refusal = ("sealed_deliveries: the Runtime asks for them and Core has no seal key "
                       "(SESSION_CORE_SEAL_KEY)")
        if refusal is None and rt.sealed_key is None and self.require_sealing:
            refusal = "sealed_deliveries: required here, and the Runtime does not ask for them"
        if refusal is not None:
            await self.fail_input(rec, refusal)
            return
        await self.send(rt, msg)
        DISPATCH_DELIVERIES.labels(kind).inc()
        log.info("dispatcher.delivered", session_id=sid, runtime_id=rt.runtime_id, kind=kind,
                 delivery_id=did)

    async def send(self, rt: RuntimeInfo, delivery: Doc) -> None:
        """``delivery`` to ``rt``: addressed to its process (``incarnation``, when it reports
        one: a restarted process does not run what its predecessor read, and Core fails the
        Turns that predecessor ran, ``restarts``), sealed to its key and Core's when it
        registered one (shared/sealing.py). Without a seal key Core never sends such a Runtime
        a tenant's content (``deliver`` fails the input first); an interrupt carries none."""
        if rt.incarnation is not None:  # the process it goes to: its successor skips it
            delivery = {**delivery, "incarnation": rt.incarnation}
        if rt.sealed_key is not None and self.core_key is not None:
            delivery = sealing.seal(delivery, [rt.sealed_key, self.core_key])
        await self.out.deliver(rt.runtime_id, delivery)

    # ---- the sweep: rebind from gone Runtimes, bind waiting Sessions, time out waits ------
    async def sweep(self) -> None:
        now = self.clock()
        load = await self._load()
        known = set(self.registry.seen(self._now())) | set(load)
        dead = {rid for rid in known if self.live(rid) is None}
        self.cleared &= dead  # a Runtime that came back may gain Sessions again
        for rid in dead - self.cleared:
            # Bindings made by any replica: asked of the store, once per Runtime that died.
            for b in await self.repo.bound_to(rid):
                log.info("dispatcher.runtime_gone", session_id=b["_id"], runtime_id=rid)
                await self.unbind(b, f"runtime {rid} is gone")
                await self.try_bind(b["_id"])
            self.cleared.add(rid)
        await self.restarts()
        for sid in await self.repo.waiting_sessions():
            if await self.try_bind(sid):
                continue
            for p in await self.repo.pending(sid):
                if now - p["queued_at"] > self.binding_wait_timeout_s:
                    waiting = await self.repo.binding(sid)
                    with tracing.within(tracing.kept(p.get("trace"))):
                        await self.fail_input(p["record"], (
                            f"no eligible Runtime within {self.binding_wait_timeout_s:g} s: "
                            f"{why_waiting(waiting) if waiting else 'no binding'}"))
                    await self.repo.unqueue(p["_id"])


    async def restarts(self) -> None:
        """Runtimes restarted under the same id (a new ``incarnation`` registered before their
        heartbeats were missed, so never gone): the native Turns the previous process ran are
        lost with it, and deliveries it had already read are not read again — nothing else
        would end those Turns. Each such Turn fails, and the Runtime is told to end it
        natively (``interrupt``: a delivery of that Turn the new process still reads is not
        run on as if Core had not failed it). The binding stays: the restarted Runtime is the
        Session's, its next Turn goes there. Checked once per incarnation seen."""
        for rid, rt in self.registry.seen(self._now()).items():
            inc = rt.incarnation
            if inc is None or self.checked.get(rid) == inc or self.live(rid) is None:
                continue
            for b in await self.repo.bound_to(rid):
                before = b.get("incarnation")
                if not b.get("turn_id") or before is None or before == inc:
                    continue
                await self.lost_on_restart(b, rt)
            self.checked[rid] = inc

    async def lost_on_restart(self, b: Doc, rt: RuntimeInfo) -> None:
        sid, turn_id = b["_id"], b["turn_id"]
        reason = f"runtime {rt.runtime_id} restarted: the native Turn it ran is lost"
        log.info("dispatcher.runtime_restarted", session_id=sid, runtime_id=rt.runtime_id,
                 turn_id=turn_id)
        # published before the binding changes: a publish that fails is tried again
        await self.publish_fact(sid, f"restart:{turn_id}:{b.get('incarnation')}", kind="turn",
                                turn_id=turn_id, state="failed", reason=reason)
        await self.send(rt, wire.interrupt_delivery(
            delivery_id=f"int_restart_{turn_id}_{rt.incarnation}", runtime_id=rt.runtime_id,
            session_id=sid, turn_id=turn_id, reason=reason))
        DISPATCH_DELIVERIES.labels("interrupt").inc()
        # settled: no later restart fails this Turn again (its next Turn's delivery names the
        # process it goes to)
        await self.repo.update_binding(sid, {"incarnation": None})


def why_waiting(b: Doc) -> str:
    need = " with message image support" if b["needs_images"] else ""
    return f"waiting for a ready {b['harness']} Runtime on placement {b['placement']}{need}"

"""dispatcher — binds Sessions to Runtimes by reported capability and delivers their input over
the Core–Runtime wire (``runtime.deliveries``). A Runtime that cannot take an input fails the
Turn (a ``turn`` Item with the reason, through storage); content is never dropped or stripped.

State lives in the store so it survives restarts: ``bindings`` (one per Session: the Runtime,
whether its input needs message images) and
``pending_deliveries`` (input waiting for an eligible Runtime, in arrival order)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage
from pymongo import ASCENDING

from services.dispatcher.registry import RegistryTail
from shared import records
from shared.domain import delivery as wire
from shared.domain.binding import RuntimeInfo, check_delivery, choose, is_alive
from shared.domain.recordcheck import UNPROCESSABLE, Poison
from shared.ids import new_id
from shared.kafka import (
    DeadLetters,
    broker_send,
    ensure_topics,
    make_broker,
    max_record_bytes,
    publish,
)
from shared.logging import bound, get_logger
from shared.metrics import (
    DISPATCH_BINDINGS,
    DISPATCH_DELIVERIES,
    DISPATCH_REFUSALS,
    set_runtimes,
)
from shared.service import decode_batch, raw_decoder
from shared.settings import Settings
from shared.store import Doc, database, make_client, ping
from shared.topics import topics_for

log = get_logger(__name__)
GROUP = "session-core-dispatcher"
LEASE = "dispatcher-sweeper"


def _now() -> datetime:
    return datetime.now(UTC)


class DispatcherService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = topics_for(settings)
        self.broker: KafkaBroker = make_broker(settings, "session-core-dispatcher")
        self.client = make_client(settings)
        self.db = database(self.client, settings)
        self.instance = new_id("rt").replace("rt_", "dsp_")
        self.dlq = DeadLetters(broker_send(self.broker), self.topics)
        self.schemas = {self.topics.session_stored: frozenset({records.STORED}),
                        self.topics.runtime_observations: frozenset({records.OBSERVATION})}
        self.registry = RegistryTail(settings, self.topics.runtime_registrations, self._changed,
                                     self.dlq)
        self.lock = asyncio.Lock()  # one decision at a time per replica
        self.wake = asyncio.Event()
        self.sweeper: asyncio.Task[None] | None = None
        self.heartbeat_timeout = timedelta(seconds=settings.runtime_heartbeat_timeout_s)
        self.load: dict[str, int] | None = None
        self.cleared: set[str] = set()  # dead Runtimes whose Sessions were already rebound
        self.broker.subscriber(
            self.topics.session_stored,
            group_id=self.topics.group(GROUP),
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=max_record_bytes(settings),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            decoder=raw_decoder,
        )(self.on_stored)
        self.broker.subscriber(
            self.topics.runtime_observations,
            group_id=self.topics.group(f"{GROUP}-observations"),
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=max_record_bytes(settings),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            decoder=raw_decoder,
        )(self.on_observation)

    # ---- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        await ensure_topics(self.settings, self.topics)
        await self.db.pending_deliveries.create_index(
            [("session_id", ASCENDING), ("n", ASCENDING)], name="pending_session_n")
        await self.registry.start()
        await self.broker.start()
        self.sweeper = asyncio.create_task(self._sweep_loop(), name="dispatcher-sweeper")
        log.info("dispatcher.started", group=GROUP)

    async def stop(self) -> None:
        if self.sweeper:
            self.sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.sweeper
        await self.broker.stop()
        await self.registry.stop()
        await self.client.close()

    async def ready(self) -> bool:
        return (self.registry.ready.is_set() and await ping(self.client)
                and await self.broker.ping(timeout=2.0))

    def _changed(self, rt: RuntimeInfo) -> None:
        set_runtimes(self.registry.runtimes.values())
        self.wake.set()

    # ---- consumers --------------------------------------------------------------------
    async def on_stored(self, body: Any, msg: KafkaMessage) -> None:
        for raw, rec in await decode_batch(self.dlq, msg.raw_message, self.schemas):
            with bound(session_id=rec.get("session_id"), turn_id=rec.get("turn_id")):
                async with self.lock:
                    try:
                        await self.accept(rec)
                    except (KeyError, TypeError, AttributeError) as exc:
                        # a record of the right schema this code cannot use: not retried
                        await self.dlq.record(raw, Poison(UNPROCESSABLE, repr(exc)[:300]))

    async def on_observation(self, body: Any, msg: KafkaMessage) -> None:
        for _raw, rec in await decode_batch(self.dlq, msg.raw_message, self.schemas):
            refusal = rec.get("refusal")
            sid = rec.get("session_id")
            if isinstance(refusal, dict) and isinstance(sid, str):
                did = str(refusal.get("delivery_id"))
                event_id = wire.event_of_delivery(did)
                if (refusal.get("kind") == "steer" and event_id is not None
                        and refusal.get("code") == wire.REFUSAL_TURN_ENDED):
                    # The harness ended the Turn before the steer reached it: storage hands
                    # the messages over again (next Turn), never drops them.
                    await self.fact(sid, f"refusal:{did}:steer", kind=records.FACT_STEER_REFUSED,
                                    turn_id=rec.get("turn_id"), event_id=event_id,
                                    delivery_id=did)
                    continue
                if refusal.get("code") == wire.REFUSAL_TURN_BOUND_EXCEEDED:
                    # The bridge refused a steer past the per-Turn bound and ends its native
                    # Turn: Core's Turn ends from that observed end (storage), not from here —
                    # a function call the native Turn makes before its end is still its own.
                    log.info("dispatcher.turn_bound_refused", session_id=sid,
                             turn_id=rec.get("turn_id"), delivery_id=did)
                    continue
                reason = f"the runtime refused the input: {refusal.get('reason')}"
                await self.fact(sid, f"refusal:{refusal.get('delivery_id')}:turn", kind="turn",
                                turn_id=rec.get("turn_id"), state="failed", reason=reason)

    # ---- facts to storage (the single Item writer) --------------------------------------
    async def fact(self, session_id: str, fact_id: str, **body: Any) -> None:
        await publish(self.broker, self.topics.core_facts,
                      {"schema": records.FACT, "fact_id": f"dsp:{fact_id}",
                       "session_id": session_id, **body}, session_id)

    # ---- binding and delivery -----------------------------------------------------------
    async def accept(self, rec: Doc) -> None:
        sid = rec["session_id"]
        b = await self.db.bindings.find_one({"_id": sid})
        if b is None:
            b = {
                "_id": sid,
                "harness": rec["harness"],
                "placement": rec["placement"],
                "needs_images": bool(rec.get("has_images")),
                "runtime_id": None,
                "status": "waiting_for_runtime",
                "waiting_since": time.time(),
                "turn_id": None,
            }
            await self.db.bindings.insert_one(b)
        images = rec["kind"] != "function_result" and wire.messages_have_images(
            rec.get("messages") or ())
        if images and not b.get("needs_images"):
            # Images that arrive after creation: from now on the Session needs a Runtime that
            # reports message images (for a re-bind below, and after its Runtime is gone).
            await self.db.bindings.update_one({"_id": sid}, {"$set": {"needs_images": True}})
            b = {**b, "needs_images": True}
        pending = await self.db.pending_deliveries.count_documents({"session_id": sid})
        rt = self._live(b.get("runtime_id"))
        if rt is not None and images and rec["kind"] == "start" and not rt.message_images:
            # A new Turn that opens with images on a Runtime without message images: re-bind
            # before the Turn starts (nothing runs natively yet). A steer into a running Turn
            # cannot move; it fails the Turn at delivery (check_delivery).
            log.info("dispatcher.rebind_for_images", session_id=sid, runtime_id=rt.runtime_id)
            await self._release(b, "the next Turn carries images")
            b = {**b, "runtime_id": None, "status": "waiting_for_runtime"}
            rt = None
        if pending == 0 and rt is not None:
            await self.deliver(b, rt, rec)
            return
        # Idempotent: a record redelivered after a crash (queued, offset not committed) must
        # not fail on its own pending entry — that stalled the partition for good. The first
        # queueing keeps its place (n) and its wait clock (queued_at).
        await self.db.pending_deliveries.update_one(
            {"_id": f"{sid}:{rec['event_id']}"},
            {"$setOnInsert": {"session_id": sid, "n": time.time_ns(),
                              "queued_at": time.time(), "record": rec}}, upsert=True)
        if b.get("status") != "waiting_for_runtime":
            await self._unbind(b, "the bound runtime is gone")
        await self.try_bind(sid)

    def _live(self, runtime_id: str | None) -> RuntimeInfo | None:
        if runtime_id is None:
            return None
        now = _now()
        rt = self.registry.seen(now).get(runtime_id)
        if rt is None or not is_alive(rt, now, self.heartbeat_timeout):
            return None
        return rt

    async def _load(self) -> dict[str, int]:
        """Sessions bound per Runtime: counted from the store once, then kept up to date as
        this replica binds and unbinds (a heuristic for spreading, not a correctness rule)."""
        if self.load is None:
            load: dict[str, int] = {}
            async for b in self.db.bindings.find({"runtime_id": {"$ne": None}},
                                                 {"runtime_id": 1}):
                load[b["runtime_id"]] = load.get(b["runtime_id"], 0) + 1
            self.load = load
        return self.load

    def _count(self, runtime_id: str | None, delta: int) -> None:
        if self.load is not None and runtime_id is not None:
            self.load[runtime_id] = max(0, self.load.get(runtime_id, 0) + delta)

    async def try_bind(self, sid: str) -> bool:
        b = await self.db.bindings.find_one({"_id": sid})
        if b is None:
            return False
        rt = self._live(b.get("runtime_id"))
        if rt is None:
            now = _now()
            rt = choose(
                self.registry.seen(now).values(), await self._load(),
                harness=b["harness"], placement=b["placement"],
                needs_message_images=b["needs_images"], now=now,
                heartbeat_timeout=self.heartbeat_timeout, session_id=sid,
            )
            if rt is None:
                if b.get("status") != "waiting_for_runtime" or not b.get("announced_wait"):
                    await self.db.bindings.update_one(
                        {"_id": sid}, {"$set": {"status": "waiting_for_runtime",
                                                "announced_wait": True}})
                    await self.fact(sid, f"wait:{sid}:{b.get('waiting_since')}", kind="binding",
                                    status="waiting_for_runtime", runtime_id=None,
                                    reason=self._why_waiting(b))
                return False
            if await self.claim(sid, b.get("runtime_id"), rt):
                b = {**b, "runtime_id": rt.runtime_id, "status": "bound"}
                self._count(rt.runtime_id, +1)
                log.info("dispatcher.bound", session_id=sid, runtime_id=rt.runtime_id)
                DISPATCH_BINDINGS.labels(rt.harness).inc()
                await self.fact(sid, f"bind:{sid}:{rt.runtime_id}:{time.time_ns()}",
                                kind="binding", status="bound", runtime_id=rt.runtime_id,
                                reason=None)
            else:  # another replica bound it first: its Runtime is the Session's
                b = await self.db.bindings.find_one({"_id": sid}) or b
                rt = self._live(b.get("runtime_id"))
                log.info("dispatcher.bound_elsewhere", session_id=sid,
                         runtime_id=b.get("runtime_id"))
                if rt is None:
                    return False
        async for p in self.db.pending_deliveries.find({"session_id": sid}).sort("n", 1):
            b = await self.db.bindings.find_one({"_id": sid}) or b
            await self.deliver(b, rt, p["record"])
            await self.db.pending_deliveries.delete_one({"_id": p["_id"]})
        return True

    async def claim(self, sid: str, read: str | None, rt: RuntimeInfo) -> bool:
        """Bind ``sid`` to ``rt`` only if its binding still names the Runtime this replica read
        (``read``; None: unbound) — a compare-and-set. The sweeper's replica (the lease holder)
        and the owner of the Session's partition (or, in a rebalance, its old and new owner)
        may bind the same waiting Session at the same moment; without it each could choose
        another Runtime, and both would deliver the Session's input: two native Turns."""
        res = await self.db.bindings.update_one(
            {"_id": sid, "runtime_id": read},
            {"$set": {"runtime_id": rt.runtime_id, "status": "bound",
                      "bound_at": time.time(), "announced_wait": False}})
        return res.matched_count == 1

    def _why_waiting(self, b: Doc) -> str:
        need = " with message image support" if b["needs_images"] else ""
        return (f"waiting for a ready {b['harness']} Runtime on placement {b['placement']}"
                f"{need}")

    async def _release(self, b: Doc, why: str) -> None:
        """Let go of the Session's Runtime between Turns (nothing to fail): the binding waits
        for an eligible Runtime again; ``try_bind`` chooses it."""
        sid = b["_id"]
        res = await self.db.bindings.update_one(
            {"_id": sid, "runtime_id": b.get("runtime_id")},
            {"$set": {"runtime_id": None, "status": "waiting_for_runtime",
                      "waiting_since": time.time(), "announced_wait": False}})
        if res.modified_count:
            self._count(b.get("runtime_id"), -1)
        log.info("dispatcher.released", session_id=sid, runtime_id=b.get("runtime_id"), why=why)

    async def _unbind(self, b: Doc, reason: str) -> None:
        sid = b["_id"]
        self._count(b.get("runtime_id"), -1)
        await self.db.bindings.update_one(
            {"_id": sid}, {"$set": {"runtime_id": None, "status": "waiting_for_runtime",
                                    "waiting_since": time.time(), "announced_wait": False}})
        if b.get("turn_id"):
            await self.fact(sid, f"gone:{b['turn_id']}:{b.get('runtime_id')}", kind="turn",
                            turn_id=b["turn_id"], state="failed", reason=reason)

    async def fail_input(self, rec: Doc, reason: str) -> None:
        sid = rec["session_id"]
        log.warning("dispatcher.turn_failed", session_id=sid, reason=reason)
        DISPATCH_REFUSALS.labels(rec["kind"]).inc()
        if rec["kind"] == "function_result":
            await self.fact(sid, f"refuse:{rec['event_id']}:app", kind="application",
                            call_id=rec["call_id"], state="failed", reason=reason)
        await self.fact(sid, f"refuse:{rec['event_id']}:turn", kind="turn",
                        turn_id=rec.get("turn_id"), state="failed", reason=reason)

    async def deliver(self, b: Doc, rt: RuntimeInfo, rec: Doc) -> None:
        sid, kind = rec["session_id"], rec["kind"]
        did = rec.get("delivery_id") or wire.delivery_id(rec["event_id"])
        if kind == "function_result":
            sub = rec["submission"]
            msg = wire.function_result_delivery(
                delivery_id=did, runtime_id=rt.runtime_id, session_id=sid,
                turn_id=rec.get("turn_id") or "", call_id=rec["call_id"], name=rec.get("name", ""),
                success=sub["success"], output=sub.get("output"), error=sub.get("error"),
                fields_present=rec.get("fields_present"),
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
            await self.db.bindings.update_one({"_id": sid}, {"$set": {"turn_id": rec["turn_id"]}})
        refusal = check_delivery(rt, kind, images)
        if refusal is not None:
            await self.fail_input(rec, refusal)
            return
        await publish(self.broker, self.topics.runtime_deliveries, msg, rt.runtime_id)
        DISPATCH_DELIVERIES.labels(kind).inc()
        log.info("dispatcher.delivered", session_id=sid, runtime_id=rt.runtime_id, kind=kind,
                 delivery_id=did)

    # ---- the sweeper: bind waiting Sessions, rebind from gone Runtimes, time out waits ---
    async def _sweep_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), 1.0)
            self.wake.clear()
            try:
                if await self._hold_lease():
                    async with self.lock:
                        await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("dispatcher.sweep_failed")

    async def _hold_lease(self) -> bool:
        now = time.time()
        ttl = max(5.0, self.settings.runtime_heartbeat_timeout_s)
        try:
            res = await self.db.leases.update_one(
                {"_id": LEASE, "$or": [{"holder": self.instance}, {"expires": {"$lt": now}}]},
                {"$set": {"holder": self.instance, "expires": now + ttl}}, upsert=True)
        except Exception:  # duplicate key: another replica holds it
            return False
        return res.matched_count + (1 if res.upserted_id is not None else 0) > 0

    async def sweep(self) -> None:
        now = time.time()
        load = await self._load()
        known = set(self.registry.runtimes) | set(load)
        dead = {rid for rid in known if self._live(rid) is None}
        self.cleared &= dead  # a Runtime that came back may gain Sessions again
        for rid in dead - self.cleared:
            # Bindings made by any replica: asked of the store, once per Runtime that died.
            gone = [b async for b in self.db.bindings.find({"runtime_id": rid})]
            self.cleared.add(rid)
            for b in gone:
                log.info("dispatcher.runtime_gone", session_id=b["_id"],
                         runtime_id=b["runtime_id"])
                await self._unbind(b, f"runtime {b['runtime_id']} is gone")
                await self.try_bind(b["_id"])
        waiting = {p["session_id"] async for p in self.db.pending_deliveries.find(
            {}, {"session_id": 1})}
        for sid in waiting:
            if await self.try_bind(sid):
                continue
            async for p in self.db.pending_deliveries.find({"session_id": sid}).sort("n", 1):
                if now - p["queued_at"] > self.settings.binding_wait_timeout_s:
                    b = await self.db.bindings.find_one({"_id": sid}) or {}
                    await self.fail_input(p["record"], (
                        f"no eligible Runtime within {self.settings.binding_wait_timeout_s:g} s: "
                        f"{self._why_waiting(b) if b else 'no binding'}"))
                    await self.db.pending_deliveries.delete_one({"_id": p["_id"]})

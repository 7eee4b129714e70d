"""Storage's handler: one batch of records (admitted input, facts, runtime observations) in,
durable Items and answers out. Order per Session is the order of the partition; the journal makes
every decision replayable, so redelivery never duplicates or re-numbers an Item."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.storage.decided import DecidedState
from services.storage.domain.agent_output import AgentSaid, Said, UsageReported, said_all
from services.storage.domain.sessions import (
    Decision,
    SessionState,
    decide_create,
    decide_fact,
    decide_message,
    decide_steer_refused,
    decide_tool_result,
)
from services.storage.repository import StorageRepository
from shared import itemstore, records
from shared.domain import errors, idempotency
from shared.domain.observations import CallOpened, TurnEnded, classify_all
from shared.domain.tenancy import DEFAULT_TENANT
from shared.logging import bound, get_logger
from shared.messages import decode, internal
from shared.messages.runtime import RuntimeObservation
from shared.metrics import STORAGE_COLD_SESSIONS
from shared.store import PK_LOOKUPS_MAX, find_by_ids
from shared.storecodec import item_from_doc
from shared.storekeys import (
    call_key,
    create_key,
    event_key,
    fact_source,
    item_key,
    request_source,
)

log = get_logger(__name__)
Json = dict[str, Any]
STEER_LOOKBACK = 1_000  # Items read back at most to find a refused steer's messages
# The field of a fact read from an observation that names the Runtime which sent it (facts read
# from observations never leave storage: the name is storage's own).
OBSERVED_BY = "observed_by"


class NotBoundYet(Exception):
    """Facts of observations whose Runtime is not the one their Session is bound to, as far as
    the Sessions decided so far show. Raised before anything of the batch is written: the
    binding may be on ``core.facts``, not read yet (it is published before the delivery that
    the observation answers, but the two topics are read independently). The caller finds out
    whether that partition of ``core.facts`` is read to its end; if it is, the observations
    are refused (``handle(…, refuse=…)``), otherwise the batch is read again later."""

    def __init__(self, keys: frozenset[str], session_ids: frozenset[str]) -> None:
        super().__init__(f"observations from a Runtime the Session is not bound to: "
                         f"{sorted(session_ids)[:5]}")
        self.keys, self.session_ids = keys, session_ids


def not_bound_reason(runtime_id: str, state: SessionState) -> str:
    bound_to = (state.binding or {}).get("runtime_id")
    return (f"runtime {runtime_id} is not the Runtime Session {state.session_id} is bound to "
            f"({bound_to or 'none'}): its observation is refused")


@dataclass
class Outputs:
    items: list[Json] = field(default_factory=list)  # to session.items, in order
    to_deliver: list[Json] = field(default_factory=list)  # to session.stored
    replies: list[Json] = field(default_factory=list)  # to the admission reply topic
    # session_id → its tenant, for every Session with Items here: the Item records on the topic
    # name it (a multi-tenant consumer routes by it); the HTTP answers, one tenant's own view,
    # do not
    tenants: dict[str, str] = field(default_factory=dict)
    # journaled decisions whose derived writes (calls, idempotency, Sessions) are
    # still to do: ``handle(…, defer_rest=True)`` leaves them to the caller, who does them while
    # the Items are being published and before any answer is sent
    rest: list[Json] = field(default_factory=list)
    # id() of each Item, stored input and answer above → the source key of the input it came
    # from, so that each record's trace goes on in what it caused (``BatchWriter``; answers
    # given before a decision are found by their request_id)
    origins: dict[int, str] = field(default_factory=dict)
    # source key → why: facts of observations refused (not the Session's Runtime), for the DLQ
    refused: dict[str, str] = field(default_factory=dict)

    def mark(self) -> tuple[int, int]:
        return len(self.items), len(self.to_deliver)

    def came_from(self, key: str, since: tuple[int, int], reply: Json | None = None) -> None:
        """The Items and stored inputs added since ``mark()`` (and ``reply``) came from the
        input ``key``."""
        for kept, start in zip((self.items, self.to_deliver), since, strict=True):
            for made in kept[start:]:
                self.origins[id(made)] = key
        if reply is not None:
            self.origins[id(reply)] = key

    def merge(self, other: Outputs) -> None:
        self.origins.update(other.origins)
        self.items += other.items
        self.to_deliver += other.to_deliver
        self.replies += other.replies
        self.tenants.update(other.tenants)
        self.rest += other.rest
        self.refused.update(other.refused)


# What storage reads from each of its topics' schemas.
RECORD_TYPES: dict[str, decode.RecordType[Any]] = {
    records.ADMITTED: decode.ADMITTED,
    records.FACT: decode.FACT,
    records.OBSERVATION: decode.OBSERVATION,
}


def inputs_of(rec: decode.Decoded[Any]) -> list[Json]:
    """The storage inputs a decoded record stands for: admitted input and facts as they came
    (their content exactly as decoded), the facts an observation shows (none: not ours)."""
    if isinstance(rec.model, internal.AdmittedCreate | internal.AdmittedEvent
                  | internal.Fact):
        return [rec.value]
    if isinstance(rec.model, RuntimeObservation):
        return _observed_facts(rec.model, rec.value)
    return []


def record_to_inputs(rec: Json) -> list[Json]:
    """``inputs_of`` a record given as a decoded JSON object (validated as if read from its
    topic: a ``ValidationError`` when it is not a record storage reads)."""
    kind = RECORD_TYPES.get(str(rec.get("schema")))
    if kind is None:
        return []
    return inputs_of(decode.Decoded(kind.adapter.validate_python(rec), rec))


def _observed_facts(obs: RuntimeObservation, rec: Json) -> list[Json]:
    """The facts one observation shows, in the order the harness printed them: what the agent
    said and the calls it made (a Claude Code record's blocks in their order), the usage it
    reported, then the Turn's end."""
    out: list[Json] = []
    sid = obs.session_id
    # every fact an observation shows names its Runtime: only the Session's bound Runtime's
    # are decided (``StorageHandler._decide``, ``NotBoundYet``)
    by = {OBSERVED_BY: obs.runtime_id}
    native = rec.get("native")
    obs_id = rec.get("observation_id") or (native or {}).get("uuid")
    root = rec.get("root_thread_id")
    said = said_all(obs.harness or "", native, fallback_id=obs_id,
                    root_thread_id=root if isinstance(root, str) else None)
    ordered: list[Said | CallOpened | TurnEnded] = [
        *said, *classify_all(obs.harness or "", native)]
    ordered.sort(key=lambda f: _printed_at(native, f))
    for c in ordered:
        if isinstance(c, AgentSaid):
            out.append({
                "schema": records.FACT,
                "fact_id": f"obs:{sid}:agent:{c.key}",
                "session_id": sid,
                "kind": "agent_message",
                "turn_id": rec.get("turn_id"),
                "text": c.text,
                "phase": c.phase,
                **by,
            })
        if isinstance(c, UsageReported):
            out.append({
                "schema": records.FACT,
                "fact_id": f"obs:{sid}:usage:{c.key}",
                "session_id": sid,
                "kind": "usage",
                "turn_id": rec.get("turn_id"),
                "usage": c.usage,
                **by,
            })
        if isinstance(c, CallOpened):
            out.append({
                "schema": records.FACT,
                "fact_id": f"obs:{sid}:call:{c.call_id}",
                "session_id": sid,
                "kind": "function_call",
                "call_id": c.call_id,
                "name": c.name,
                "arguments": c.arguments,
                "native_ids": c.native_ids,
                "turn_id": rec.get("turn_id"),
                **by,
            })
        if isinstance(c, TurnEnded) and not rec.get("native_turn_continues"):
            # (a Claude Code bridge forwards an intermediate ``result`` — a queued steer runs
            # next in the same bridge Turn — with native_turn_continues; runtimes/
            # claude/live.py)
            out.append({
                "schema": records.FACT,
                "fact_id": f"obs:{sid}:turn_end:{rec.get('turn_id') or obs_id}",
                "session_id": sid,
                "kind": "turn",
                "turn_id": rec.get("turn_id"),
                "state": c.state,
                "reason": _end_reason(c.state, rec.get("end_reason")),
                **by,
            })
    return out


def _printed_at(native: Any, fact: Said | CallOpened | TurnEnded) -> int:
    """Where in its record the harness printed ``fact``: a Claude Code ``assistant`` record's
    block index (text and ``tool_use`` blocks may share a record); usage before a Turn's end,
    which comes last."""
    if isinstance(fact, TurnEnded):
        return 1 << 30
    if isinstance(fact, UsageReported):
        return (1 << 30) - 1
    msg = native.get("message") if isinstance(native, dict) else None
    blocks = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(blocks, list):
        return 0
    if isinstance(fact, AgentSaid):
        return int(fact.key.rsplit(":", 1)[1])
    for i, b in enumerate(blocks):
        if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id") == fact.call_id:
            return i
    return 0


def _end_reason(state: str, end_reason: Any) -> str | None:
    """A failed native end's reason: the Runtime's own (``end_reason`` on the envelope, set when
    its bridge ended the Turn itself, e.g. the 64-message bound) or a generic one."""
    if state == "completed":
        return None
    if isinstance(end_reason, str) and end_reason:
        return f"the runtime ended the native Turn: {end_reason}"
    return "the harness ended the turn"


def source_key(rec: Json) -> str:
    if rec["schema"] == records.ADMITTED:
        return request_source(rec["request_id"])
    return fact_source(rec["fact_id"])


def _create_key(r: Json) -> str:
    return create_key(r.get("tenant") or DEFAULT_TENANT, r["client_request_id"])


def _whole_reply(reply: Json, items: list[Json]) -> Json:
    """``reply`` with its Items replaced by their whole form (``items``, by id)."""
    body = reply.get("body")
    if not isinstance(body, dict) or not isinstance(body.get("items"), list):
        return reply
    by_id = {it.get("id"): it for it in items}
    return {**reply, "body": {**body, "items": [by_id.get(it.get("id"), it)
                                                 for it in body["items"]]}}


def _reply(request_id: str, err: errors.ApiError) -> Json:
    return {"request_id": request_id, "status": err.status, "body": err.body()}


class StorageHandler:
    """Decides batches. What it may take from memory — Session states, which records cannot have
    been decided before — is ``DecidedState``'s to say (``services/storage/decided.py``)."""

    def __init__(self, repo: StorageRepository, now: Callable[[], str],
                 decided: DecidedState | None = None) -> None:
        self.repo = repo
        self.now = now
        self.decided = decided if decided is not None else DecidedState(batch_max=0)
        self.traced = False  # tracing on: ``Outputs.origins`` kept (the storage app sets it)

    async def _states(self, session_ids: set[str], current: frozenset[str]
                      ) -> dict[str, SessionState]:
        """Each Session's state: from memory, else from the store — its document, and (unless
        its shard's documents are ``current``: ``DecidedState``) the Items past it."""
        states: dict[str, SessionState] = {}
        missing = []
        for sid in session_ids:
            known = self.decided.session(sid)
            if known is not None:
                states[sid] = known
            else:
                missing.append(sid)
        loaded = await self.repo.sessions(missing)
        probe = [sid for sid in missing if sid not in current]
        if len(probe) < len(missing):
            STORAGE_COLD_SESSIONS.labels("trusted").inc(len(missing) - len(probe))
        if probe:
            STORAGE_COLD_SESSIONS.labels("probed").inc(len(probe))
        states.update(await self.repo.roll_forward(loaded, probe))
        self.decided.repaired(probe)
        return states

    async def handle(self, inputs: list[Json], verify: frozenset[str] = frozenset(),
                     defer_rest: bool = False, current: frozenset[str] = frozenset(),
                     refuse: frozenset[str] = frozenset(),
                     positions: dict[str, list[Any]] | None = None) -> Outputs:
        """``verify``: source keys that another writer may have decided although memory is
        trusted (``DecidedState.arrived``). ``defer_rest``: return after the commit point (Items
        and journal written) with the derived writes in ``Outputs.rest``; the caller must
        ``repo.apply_rest`` them before it answers anyone or decides the next batch.
        ``current``: Sessions whose documents, read from the store, need no look-up of Items
        past them (their shard was handed over clean: ``DecidedState``). ``refuse``: source
        keys of observed facts whose Runtime is known not to be their Session's (``NotBoundYet``
        was raised for them and ``core.facts`` is read to its end): decided as refused, nothing
        written to the Session (``Outputs.refused``). ``positions``: each record's [topic,
        partition, offset] by source key, journaled with its decision
        (services/storage/publishorder.py)."""
        out = Outputs()
        if not inputs:
            return out
        keys = [source_key(r) for r in inputs]
        lookup = [k for k in keys if self.decided.needs_lookup(k, k in verify)]
        journal = await self.repo.journal(lookup)
        states = await self._states({r["session_id"] for r in inputs}, current)
        stored = {sid: st.version for sid, st in states.items() if st is not None}
        idem_keys, call_keys = [], []
        for r in inputs:
            if r["schema"] != records.ADMITTED:
                continue
            if r.get("client_request_id"):
                idem_keys.append(_create_key(r))
            if r.get("client_event_id"):
                idem_keys.append(event_key(r["session_id"], r["client_event_id"]))
            if r.get("event_type") == records.EV_TOOL_RESULT:
                call_keys.append(call_key(r["session_id"], r["call_id"]))
        idem = await self.repo.idempotency(idem_keys)
        calls = await self.repo.calls(call_keys)
        refused = await self._refused_steers(inputs, states)
        unbound = self._not_bound(inputs, keys, states, journal)
        if unbound - refuse:
            raise NotBoundYet(frozenset(unbound - refuse), frozenset(
                r["session_id"] for r, k in zip(inputs, keys, strict=True) if k in unbound))

        replayed: list[Json] = []
        replayed_keys: list[str] = []
        fresh: list[Decision] = []
        skipped: list[Json] = []  # inputs that decided nothing: their tombstones
        journaled: list[Decision | Json] = []  # fresh decisions and tombstones, in input order
        decided: dict[str, Decision] = {}
        repeats: list[Decision] = []  # a record redelivered within this same batch
        for r, key in zip(inputs, keys, strict=True):
            if key in decided:
                repeats.append(decided[key])
                continue
            if key in journal:
                j = journal[key]
                replayed.append(j)
                replayed_keys.append(key)
                if j["state"] is not None:
                    _forward(states, SessionState.from_doc(j["state"]))
                continue
            if key in unbound:  # (in ``refuse``: a tombstone, the reason to the DLQ)
                held = states[r["session_id"]]
                assert held is not None
                out.refused[key] = not_bound_reason(str(r[OBSERVED_BY]), held)
                d = None
            else:
                with bound(session_id=r["session_id"], request_id=r.get("request_id"),
                           call_id=r.get("call_id")):
                    d = self._decide(r, states, idem, calls, refused, out)
            if d is None:
                tomb = self.repo.tombstone(key, r["session_id"])
                skipped.append(tomb)
                journaled.append(tomb)
                continue
            fresh.append(d)
            journaled.append(d)
            decided[key] = d
            if d.state is not None:
                states[d.session_id] = d.state
            for doc in d.idempotency:
                idem[doc["_id"]] = {**doc, "item_keys": [
                    item_key(i["session_id"], i["sequence"]) for i in d.items]}
            for cu in d.call_updates:
                calls[cu["_id"]] = {**calls.get(cu["_id"], {}), **cu.get("set", {}),
                                    **cu.get("set_on_insert", {})}
            for msg in d.log:
                log.info(msg, session_id=d.session_id)

        # Replays first (they precede fresh decisions in partition order).
        if replayed:
            await self.repo.apply(replayed, stored)
            for j, key in zip(replayed, replayed_keys, strict=True):
                since, replies = out.mark(), len(out.replies)
                await self._replay_outputs(j, out)
                out.came_from(key, since, out.replies[-1] if len(out.replies) > replies
                              else None)
        docs, chunks = [], []
        for entry in journaled:
            if isinstance(entry, Decision):
                doc, ch = self.repo.journal_doc(entry)
                if positions and entry.source_key in positions:
                    doc["position"] = positions[entry.source_key]
                chunks.extend(ch)
                docs.append(doc)
            else:
                docs.append(entry)
        await self.repo.commit(docs, chunks)
        if defer_rest:
            out.rest = docs
        else:
            await self.repo.apply_rest(docs)
        self.decided.decided(keys, {k: v for k, v in states.items() if v is not None})
        traced = self.traced
        for d in fresh + repeats:  # a repeat answers again, with the same Items (same ids)
            since = out.mark() if traced else (0, 0)
            # published whole: an agent message decided from a held text read back from the
            # store holds a chunk reference (shared/image_store.py, externalize_state)
            items = await self.repo.whole(d.items)
            out.items.extend(items)
            if d.to_deliver is not None:
                out.to_deliver.append(d.to_deliver)
            if d.reply is not None:
                out.replies.append(d.reply if items is d.items else _whole_reply(d.reply, items))
            if traced:
                out.came_from(d.source_key, since, d.reply)
        for item in out.items:
            state = states.get(item["session_id"])
            out.tenants[item["session_id"]] = state.tenant if state else DEFAULT_TENANT
        return out

    @staticmethod
    def _not_bound(inputs: list[Json], keys: list[str], states: dict[str, Any],
                   journal: dict[str, Json]) -> set[str]:
        """Source keys of facts read from observations of a Runtime their Session is not bound
        to: not by the state decided so far, nor by a binding fact in this batch (which is
        decided in its place; its Runtime's observations beside it are its Session's).
        Journaled ones are replayed as decided."""
        binds = {(r["session_id"], r.get("runtime_id")) for r in inputs
                 if r["schema"] == records.FACT and r.get("kind") == "binding"
                 and r.get("status") == "bound"}
        out = set()
        for r, key in zip(inputs, keys, strict=True):
            by = r.get(OBSERVED_BY)
            if by is None or key in journal:
                continue
            state = states.get(r["session_id"])
            if state is None:
                continue  # no such Session: decided as before (a logged no-op)
            if (state.binding or {}).get("runtime_id") == by:
                continue
            if (r["session_id"], by) in binds:
                continue
            out.add(key)
        return out

    async def _refused_steers(self, inputs: list[Json], states: dict[str, SessionState]
                              ) -> dict[str, list[Json]]:
        """The stored message Items of each steer a Runtime refused (fact_id → Items)."""
        out: dict[str, list[Json]] = {}
        for r in inputs:
            if r["schema"] == records.FACT and r.get("kind") == records.FACT_STEER_REFUSED:
                state = states.get(r["session_id"])
                if state is not None:
                    out[r["fact_id"]] = await self._event_messages(state, str(r.get("event_id")))
        return out

    async def _event_messages(self, state: SessionState, event_id: str) -> list[Json]:
        """An event's message Items, read back newest first by primary key (a refusal comes
        seconds after its steer, so they are near the end; consecutive, as decided). Nothing
        is kept per steer on the hot path; at most ``STEER_LOOKBACK`` Items are read."""
        found: list[Json] = []
        hi = state.last_sequence
        while hi > 0 and state.last_sequence - hi < STEER_LOOKBACK:
            lo = max(0, hi - PK_LOOKUPS_MAX)
            docs = await find_by_ids(self.repo.db.items,
                                     [item_key(state.session_id, n) for n in range(lo + 1, hi + 1)])
            page = sorted((item_from_doc(d) for d in docs.values()),
                          key=lambda i: -int(i["sequence"]))
            for it in page:
                if it.get("type") == "message" and it.get("event_id") == event_id:
                    found.append(it)
                elif found:  # past the event's consecutive Items
                    return await itemstore.rehydrate(self.repo.db, found[::-1])
            hi = lo
        return await itemstore.rehydrate(self.repo.db, found[::-1])

    def _decide(
        self,
        r: Json,
        states: dict[str, SessionState],
        idem: dict[str, Json],
        calls: dict[str, Json],
        refused: dict[str, list[Json]],
        out: Outputs,
    ) -> Decision | None:
        now = self.now()
        sid = r["session_id"]
        state = states.get(sid)
        if r["schema"] == records.FACT:
            if state is None:
                log.warning("fact.unknown_session", session_id=sid, kind=r.get("kind"))
                return None
            if r.get("kind") == records.FACT_STEER_REFUSED:
                return decide_steer_refused(state, r, refused.get(r["fact_id"], []), now)
            return decide_fact(state, r, now)
        rid = r["request_id"]
        if r["op"] == records.OP_CREATE:
            if r.get("client_request_id") and _create_key(r) in idem:
                self._answer(rid, idempotency.repeat(idem[_create_key(r)], r["fingerprint"],
                                                     "create"), out)
                return None
            if state is not None:  # the same request already decided under this session id
                return None
            return decide_create(r, now)
        if state is None or state.tenant != (r.get("tenant") or DEFAULT_TENANT):
            # Admission already answered 404 for another tenant's Session; this guards the
            # store against any other writer of session.admitted.
            out.replies.append(_reply(rid, errors.not_found("no such Session", "session_id")))
            return None
        ceid = r.get("client_event_id")
        if ceid and event_key(sid, ceid) in idem:
            self._answer(rid, idempotency.repeat(idem[event_key(sid, ceid)], r["fingerprint"],
                                                 "event"), out)
            return None
        if r["event_type"] == records.EV_MESSAGE:
            return decide_message(state, r, now)
        call = calls.get(call_key(sid, r["call_id"]))
        repeated = idempotency.result_repeat(call, r["submission_fingerprint"])
        if repeated is not None:
            self._answer(rid, repeated, out)
            return None
        assert call is not None  # result_repeat answered an unknown call
        return decide_tool_result(state, {**r, "name": call.get("name")}, now)

    @staticmethod
    def _answer(request_id: str, repeated: idempotency.Replay | errors.ApiError, out: Outputs
                ) -> None:
        """A retry answered again (``shared.domain.idempotency``, the rule admission applies
        before the hand-over); ``load_reply_items`` adds the Items."""
        if isinstance(repeated, errors.ApiError):
            out.replies.append(_reply(request_id, repeated))
        else:
            out.replies.append({"request_id": request_id, "status": repeated.status,
                                "body": repeated.body, "item_keys": repeated.item_keys})

    async def _replay_outputs(self, j: Json, out: Outputs) -> None:
        items = await self.repo.rehydrate(copy.deepcopy(j["items"]))
        out.items.extend(items)
        if j.get("reply"):
            reply = copy.deepcopy(j["reply"])
            reply["body"]["items"] = items
            out.replies.append(reply)
        if j.get("stored"):
            stored = copy.deepcopy(j["stored"])
            if stored.get("message_keys"):  # messages handed over again (a refused steer)
                msgs = await itemstore.items_by_keys(self.repo.db, stored["message_keys"])
                stored["messages"] = [{"role": "user", "content": it["content"]} for it in msgs]
            elif stored["kind"] in ("start", "steer"):
                stored["messages"] = [
                    {"role": "user", "content": it["content"]}
                    for it in items if it["type"] == "message"
                ]
            else:
                for cu in j["call_updates"]:
                    if "set" in cu and "submission" in cu["set"]:
                        stored["submission"] = cu["set"]["submission"]
            out.to_deliver.append(stored)


def _forward(states: dict[str, SessionState], replayed: SessionState) -> None:
    """A replayed decision's state, unless the Session is already past it. A record decided
    before a crash can come back after later records of its Session were decided — from
    another topic, or after the roll-forward took the store's state: setting the Session back
    would decide the next record at a sequence already taken (its Item dropped by the unique
    index and published anyway: an admitted input lost)."""
    current = states.get(replayed.session_id)
    if current is None or current.version < replayed.version:
        states[replayed.session_id] = replayed


async def load_reply_items(repo: StorageRepository, reply: Json) -> Json:
    """Duplicate answers carry Item ids; fill in the stored Items."""
    keys = reply.pop("item_keys", None)
    if keys:
        reply["body"]["items"] = await itemstore.items_by_keys(repo.db, [k for k in keys if k])
    return reply


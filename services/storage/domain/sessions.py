"""The Session state machine that storage (the single Item writer) applies to each durable fact.

Pure: given the Session's state and one record (admitted input or a fact from the dispatcher,
the receipt tracker or a runtime observation), decide the Items to write, the new state, the
answer to send back, and the input to hand to the dispatcher. Storage journals the decision
before applying it, so a redelivered record replays the same decision instead of re-deciding.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from services.storage.domain.agent_output import PROVIDER_PHASES, add_usage
from shared.domain.tenancy import DEFAULT_TENANT
from shared.domain.wire import next_delivery_id
from shared.storekeys import (
    call_key,
    create_key,
    event_key,
    fact_source,
    item_key,
    request_source,
)

Delivery = Literal["started", "steered", "resumed", "duplicate"]
Json = dict[str, Any]


@dataclass(frozen=True)
class SessionState:
    session_id: str
    harness: str
    placement: str
    created_at: str
    version: int = 0
    last_sequence: int = 0
    turn_id: str | None = None
    turn_running: bool = False
    status: str = "waiting_for_runtime"
    binding: Json | None = None
    metadata: Json | None = None
    open_calls: dict[str, str] = field(default_factory=dict)  # call_id → name
    tenant: str = DEFAULT_TENANT  # the tenant of the key that created it; never changes
    # the running Turn's last agent message whose phase the harness did not give, held until
    # what follows it decides the phase ({"turn_id", "text"}; ``_flush_said``)
    said: Json | None = None
    turn_usage: Json | None = None  # the running Turn's usage reported so far (summed)

    def evolve(self, **changes: Any) -> SessionState:
        """``dataclasses.replace(self, **changes)`` without its per-field introspection (5–8 µs
        a call there, ~2 µs here; a decision makes one or two on storage's hot path)."""
        if not changes.keys() <= _STATE_FIELDS:
            raise TypeError(f"SessionState has no field {sorted(changes.keys() - _STATE_FIELDS)}")
        new = object.__new__(SessionState)
        vars(new).update(vars(self), **changes)  # frozen: __setattr__ refuses, __dict__ not
        return new

    def to_doc(self) -> Json:
        return {
            "_id": self.session_id,
            "harness": self.harness,
            "placement": self.placement,
            "created_at": self.created_at,
            "version": self.version,
            "last_sequence": self.last_sequence,
            "turn_id": self.turn_id,
            "turn_running": self.turn_running,
            "status": self.status,
            "binding": self.binding,
            "metadata": self.metadata,
            "open_calls": dict(self.open_calls),
            "tenant": self.tenant,
            "said": self.said,
            "turn_usage": self.turn_usage,
        }

    @classmethod
    def from_doc(cls, doc: Json) -> SessionState:
        return cls(
            session_id=doc["_id"],
            harness=doc["harness"],
            placement=doc["placement"],
            created_at=doc["created_at"],
            version=doc.get("version", 0),
            last_sequence=doc.get("last_sequence", 0),
            turn_id=doc.get("turn_id"),
            turn_running=doc.get("turn_running", False),
            status=doc.get("status", "waiting_for_runtime"),
            binding=doc.get("binding"),
            metadata=doc.get("metadata"),
            open_calls=dict(doc.get("open_calls") or {}),
            tenant=doc.get("tenant") or DEFAULT_TENANT,
            said=doc.get("said"),
            turn_usage=doc.get("turn_usage"),
        )


_STATE_FIELDS = frozenset(f.name for f in fields(SessionState))


@dataclass
class Decision:
    """Everything one record causes. ``state`` is None when the record changes nothing."""

    source_key: str
    session_id: str
    state: SessionState | None = None
    items: list[Json] = field(default_factory=list)
    reply: Json | None = None  # {"request_id", "status", "body"} for admission
    to_deliver: Json | None = None  # the input the dispatcher must deliver
    call_updates: list[Json] = field(default_factory=list)  # {"_id", "$set": {...}}
    idempotency: list[Json] = field(default_factory=list)  # docs for the idempotency collection
    # a call's verdict, {"_id": call key, "state", "reason", "at"}: kept in the decision's
    # journal entry only, which readers find by the verdict's fact id (no document of its own:
    # verdicts come in bursts of thousands, and each document is store work)
    applications: list[Json] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


class IdSource:
    """Deterministic ids derived from the source record so a re-decision (never expected, but
    possible after a lost journal write) mints the same ids."""

    def __init__(self, source_key: str) -> None:
        self._seed = source_key
        self._n = 0

    def next(self, prefix: str) -> str:
        self._n += 1
        digest = hashlib.sha256(f"{self._seed}#{self._n}".encode()).hexdigest()[:32]
        return f"{prefix}_{digest}"


def _item(sess: SessionState, seq: int, ids: IdSource, now: str, kind: str, **body: Any) -> Json:
    return {
        "id": ids.next("item"),
        "session_id": sess.session_id,
        "sequence": seq,
        "type": kind,
        "created_at": now,
        **body,
    }


class _Builder:
    """The Items one decision adds, numbered after the Session's last, their ids minted from the
    decided record's source key."""

    def __init__(self, state: SessionState, source_key: str, now: str) -> None:
        self.state = state
        self.ids = IdSource(source_key)
        self.now = now
        self.items: list[Json] = []

    def add(self, kind: str, **body: Any) -> Json:
        seq = self.state.last_sequence + 1
        item = _item(self.state, seq, self.ids, self.now, kind, **body)
        self.state = self.state.evolve(last_sequence=seq)
        self.items.append(item)
        return item


def _agent_item(b: _Builder, turn_id: str, text: str, phase: str, source: str) -> Json:
    """An agent message Item: the text exactly as the harness printed it, one part."""
    return b.add("message", role="agent", turn_id=turn_id,
                 content=[{"type": "output_text", "text": text}], phase=phase,
                 phase_source=source)


def _flush_said(b: _Builder, phase: str) -> None:
    """The held agent message (``SessionState.said``), published with the phase what followed
    it decided: ``commentary`` when a function call or another message of its Turn follows,
    ``final_answer`` when its Turn ends first. Its text is opaque here: read back from the
    store, a long one is a chunk reference (``{"text_ref": …}``, shared/image_store.py), and
    storage makes the Item whole before publishing it."""
    said = b.state.said
    if said is not None:
        b.state = b.state.evolve(said=None)
        _agent_item(b, said["turn_id"], said["text"], phase, "derived")


def _end_turn(b: _Builder, turn_id: str | None, state: str, reason: str | None) -> None:
    """A Turn's end: its held message is its final answer, then the ``turn`` Item with the
    usage the harness reported for the Turn (``null`` when it reported none)."""
    _flush_said(b, "final_answer")
    b.add("turn", turn_id=turn_id, state=state, reason=reason, usage=b.state.turn_usage)
    b.state = b.state.evolve(turn_running=False, turn_usage=None)


def _message_items(b: _Builder, messages: list[Json], event_id: str, turn_id: str,
                   extra: Json) -> list[Json]:
    out = []
    for m in messages:
        out.append(
            b.add(
                "message",
                role="user",
                content=copy.deepcopy(m["content"]),
                event_id=event_id,
                turn_id=turn_id,
                **extra,
            )
        )
    return out


def _passthrough(record: Json) -> Json:
    extra: Json = {}
    for k in ("metadata", "tags", "external_actor"):
        if record.get(k) is not None:
            extra[k] = copy.deepcopy(record[k])
    return extra


def _has_images(parts: list[Json]) -> bool:
    return any(p.get("type") == "input_image" for p in parts)


def stored_input(state: SessionState, *, turn_id: str | None, kind: str, event_id: str,
                 item_ids: list[str], **fields: Any) -> Json:
    """The input the dispatcher must deliver (the body of a ``session.stored`` record; storage
    adds the envelope when it publishes, ``shared.records.stored_record``): where it goes, what
    it is, the Items it was stored as, and the ``fields`` of its ``kind``."""
    return {
        "session_id": state.session_id,
        "harness": state.harness,
        "placement": state.placement,
        "turn_id": turn_id,
        "kind": kind,
        "event_id": event_id,
        **fields,
        "item_ids": item_ids,
    }


def _stored_messages(state: SessionState, turn_id: str, kind: str, event_id: str,
                     msgs: list[Json], **fields: Any) -> Json:
    """Messages to start a Turn with or steer into one; ``msgs`` are their message Items."""
    return stored_input(
        state, turn_id=turn_id, kind=kind, event_id=event_id, item_ids=[m["id"] for m in msgs],
        **fields,
        messages=[{"role": "user", "content": m["content"]} for m in msgs],
        has_images=any(_has_images(m["content"]) for m in msgs))


def _idempotency(key: str, record: Json, status: int, body: Json) -> Json:
    """What a repeat under the same client-minted id gets back."""
    return {
        "_id": key,
        "request_id": record["request_id"],
        "fingerprint": record["fingerprint"],
        "status": status,
        "body": body,
    }


def decide_create(record: Json, now: str) -> Decision:
    sid = record["session_id"]
    key = request_source(record["request_id"])
    state = SessionState(
        session_id=sid,
        harness=record["harness"],
        placement=record["placement"],
        created_at=now,
        metadata=copy.deepcopy(record.get("metadata")),
        tenant=record.get("tenant") or DEFAULT_TENANT,
    )
    b = _Builder(state, key, now)
    turn_id = b.ids.next("turn")
    extra = _passthrough(record)
    msgs = _message_items(b, record["messages"], record["event_id"], turn_id, extra)
    b.add("turn", turn_id=turn_id, state="started", reason=None)
    state = b.state.evolve(version=1, turn_id=turn_id, turn_running=True)
    d = Decision(source_key=key, session_id=sid, state=state, items=b.items)
    body: Json = {
        "id": sid,
        "harness": state.harness,
        "placement": state.placement,
        "status": state.status,
    }
    if record.get("metadata") is not None:
        body["metadata"] = copy.deepcopy(record["metadata"])
    # "items" last: replays and idempotent repeats rebuild it from the stored Items and append
    # it, so the repeated answer is byte-identical to the first.
    body["items"] = b.items
    d.reply = {"request_id": record["request_id"], "status": 201, "body": body}
    d.to_deliver = _stored_messages(state, turn_id, "start", record["event_id"], msgs)
    if record.get("client_request_id"):
        d.idempotency.append(
            _idempotency(create_key(state.tenant, record["client_request_id"]),
                         record, 201, body))
    return d


def decide_message(state: SessionState, record: Json, now: str) -> Decision:
    key = request_source(record["request_id"])
    b = _Builder(state, key, now)
    if state.turn_running and state.turn_id:
        delivery: Delivery = "steered"
        turn_id = state.turn_id
        kind = "steer"
    else:
        delivery = "started"
        turn_id = b.ids.next("turn")
        kind = "start"
    msgs = _message_items(b, record["messages"], record["event_id"], turn_id, _passthrough(record))
    changes: Json = {}
    if delivery == "started":
        b.add("turn", turn_id=turn_id, state="started", reason=None)
        changes["turn_usage"] = None
    new = b.state.evolve(version=state.version + 1, turn_id=turn_id, turn_running=True,
                         **changes)
    d = Decision(source_key=key, session_id=state.session_id, state=new, items=b.items)
    body = {"event_id": record["event_id"], "delivery": delivery, "items": b.items}
    d.reply = {"request_id": record["request_id"], "status": 202, "body": body}
    d.to_deliver = _stored_messages(state, turn_id, kind, record["event_id"], msgs)
    if record.get("client_event_id"):
        d.idempotency.append(_idempotency(
            event_key(state.session_id, record["client_event_id"]), record, 202, body))
    return d


def decide_steer_refused(state: SessionState, fact: Json, messages: list[Json], now: str
                         ) -> Decision:
    """A Runtime refused a ``steer`` because its native Turn had already ended (the harness
    ended it before the steer reached it; Core's view still had it running). The messages are
    stored and published once already; they are handed over again, never dropped: into the
    Turn running by now (steer), or as the start of a new Turn. If Core still has the refused
    Turn running, the Runtime's word ends it first (its own end observation, when it comes, is
    then for an inactive Turn). ``messages`` are the event's stored message Items (storage
    reads them back: nothing is kept per steer on the hot path)."""
    key = fact_source(fact["fact_id"])
    b = _Builder(state, key, now)
    d = Decision(source_key=key, session_id=state.session_id)
    event_id = fact["event_id"]
    if not messages:
        d.log.append("steer_refused.unknown_event")
        return d
    ended = fact.get("turn_id")
    turn_id, running = state.turn_id, state.turn_running
    if running and turn_id == ended:
        _end_turn(b, ended, "completed",
                  "the runtime had ended the Turn before a steered message reached it")
        running = False
    if running and turn_id:
        kind = "steer"
    else:
        kind = "start"
        turn_id = b.ids.next("turn")
        b.add("turn", turn_id=turn_id, state="started",
              reason=f"a message steered into {ended} reached the runtime after that Turn "
                     "ended; it starts this Turn")
    assert turn_id is not None
    d.items = b.items
    d.state = b.state.evolve(version=state.version + 1, turn_id=turn_id, turn_running=True)
    d.to_deliver = _stored_messages(
        state, turn_id, kind, event_id, copy.deepcopy(messages),
        delivery_id=next_delivery_id(str(fact["delivery_id"])),
        # the journal keeps no content: a replay reads the messages back by these keys
        message_keys=[item_key(state.session_id, m["sequence"]) for m in messages])
    return d


def decide_tool_result(state: SessionState, record: Json, now: str) -> Decision:
    key = request_source(record["request_id"])
    b = _Builder(state, key, now)
    sub = record["submission"]
    call_id = record["call_id"]
    item = b.add(
        "function_call_output",
        call_id=call_id,
        success=sub["success"],
        output=copy.deepcopy(sub.get("output")),
        error=sub.get("error"),
        event_id=record["event_id"],
        turn_id=state.turn_id,
        **_passthrough(record),
    )
    open_calls = dict(state.open_calls)
    name = open_calls.pop(call_id, record.get("name") or "")
    new = b.state.evolve(version=state.version + 1, open_calls=open_calls)
    d = Decision(source_key=key, session_id=state.session_id, state=new, items=b.items)
    body = {"event_id": record["event_id"], "delivery": "resumed", "items": b.items}
    d.reply = {"request_id": record["request_id"], "status": 202, "body": body}
    d.call_updates.append(
        {
            "_id": call_key(state.session_id, call_id),
            "set": {
                "submission": copy.deepcopy(sub),
                "fields_present": list(record["fields_present"]),
                "fingerprint": record["submission_fingerprint"],
                "submitted_at": now,
                "event_id": record["event_id"],
                "output_item_id": item["id"],
                "output_item_key": item_key(state.session_id, item["sequence"]),
                "answer": body,
                "application": {"state": "pending", "reason": None, "at": now},
            },
        }
    )
    d.to_deliver = stored_input(
        state, turn_id=state.turn_id, kind="function_result", event_id=record["event_id"],
        item_ids=[item["id"]], call_id=call_id, name=name, submission=copy.deepcopy(sub),
        fields_present=list(record["fields_present"]))
    if record.get("client_event_id"):
        d.idempotency.append(_idempotency(
            event_key(state.session_id, record["client_event_id"]), record, 202, body))
    return d


def decide_fact(state: SessionState, fact: Json, now: str) -> Decision:
    """Facts from the dispatcher, the receipt tracker and runtime observations."""
    key = fact_source(fact["fact_id"])
    b = _Builder(state, key, now)
    kind = fact["kind"]
    d = Decision(source_key=key, session_id=state.session_id)
    new = state
    if kind == "function_call":
        call_id = fact["call_id"]
        if call_id in state.open_calls:
            d.log.append("function_call.repeat")
            return d
        called_in = fact.get("turn_id")  # the Core Turn the Runtime observed it in
        if called_in is not None and (not state.turn_running or called_in != state.turn_id):
            # The harness printed it before Core's end of that Turn reached it (the dispatcher
            # failed the Turn and sent an interrupt): nobody may answer it through Core, and
            # it must not open a call on the Turn that runs now. The Runtime releases it when
            # the native Turn ends (docs/runtime-boundary.md, "Calls printed after Core ended
            # their Turn").
            d.log.append("function_call.for_ended_turn")
            return d
        _flush_said(b, "commentary")  # a message before the call is not the Turn's answer
        b.add(
            "function_call",
            call_id=call_id,
            name=fact["name"],
            arguments=copy.deepcopy(fact.get("arguments")),
            turn_id=state.turn_id,
        )
        open_calls = {**state.open_calls, call_id: fact["name"]}
        new = b.state.evolve(open_calls=open_calls)
        d.call_updates.append(
            {
                "_id": call_key(state.session_id, call_id),
                "set_on_insert": {
                    "session_id": state.session_id,
                    "call_id": call_id,
                    "name": fact["name"],
                    "arguments": copy.deepcopy(fact.get("arguments")),
                    "native": copy.deepcopy(fact.get("native_ids")),
                    "opened_at": now,
                    "submission": None,
                    "application": None,
                },
            }
        )
    elif kind == "turn":
        tid = fact["turn_id"] or state.turn_id
        if fact["state"] in ("completed", "failed"):
            if not state.turn_running or tid != state.turn_id:
                d.log.append("turn.end_for_inactive_turn")
                return d
            _end_turn(b, tid, fact["state"], fact.get("reason"))
            new = b.state
        else:
            return d
    elif kind == "agent_message":
        tid = fact.get("turn_id") or state.turn_id
        if tid is None:
            d.log.append("agent_message.no_turn")
            return d
        running = state.turn_running and tid == state.turn_id
        if running:
            _flush_said(b, "commentary")  # a later message of its Turn follows it
        if fact.get("phase") in PROVIDER_PHASES:
            _agent_item(b, tid, fact["text"], fact["phase"], "provider")
        elif running:
            b.state = b.state.evolve(said={"turn_id": tid, "text": fact["text"]})
        else:
            # printed after Core ended its Turn: nothing can follow it there
            _agent_item(b, tid, fact["text"], "final_answer", "derived")
        new = b.state
    elif kind == "usage":
        if not state.turn_running or (fact.get("turn_id") or state.turn_id) != state.turn_id:
            d.log.append("usage.for_inactive_turn")
            return d
        new = state.evolve(turn_usage=add_usage(state.turn_usage, fact["usage"]))
    elif kind == "application":
        call_id = fact["call_id"]
        b.add(
            "function_call_application",
            call_id=call_id,
            state=fact["state"],
            reason=fact.get("reason"),
        )
        new = b.state
        d.applications.append({"_id": call_key(state.session_id, call_id),
                               "state": fact["state"], "reason": fact.get("reason"), "at": now})
    elif kind == "binding":
        new = state.evolve(
            status=fact["status"],
            binding={"runtime_id": fact.get("runtime_id"), "reason": fact.get("reason"),
                     "at": now},
        )
    else:
        d.log.append(f"fact.unknown_kind:{kind}")
        return d
    d.items = b.items
    d.state = new.evolve(version=state.version + 1)
    return d

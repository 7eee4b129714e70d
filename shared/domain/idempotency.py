"""Retries: what a request answers when its idempotency id, or the call it answers, was decided
before. One rule for admission (which answers from the store before handing a request over) and
storage (which decides again when two retries crossed in flight), so both answer with the same
status, body, wording and ``param``.

An identical repeat replays the stored answer; a different one under the same id is 409. A
function result for a call that already has one is a ``duplicate`` when identical (CONTRACT §1),
409 otherwise. Pure: the caller reads the prior records and loads the Items named by
``item_keys``."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from shared.domain import errors
from shared.domain.errors import ApiError

Json = dict[str, Any]
Op = Literal["create", "event"]

# An idempotency id names the request per operation: a Session create answers 201 and is named
# by client_request_id, an event answers 202 and is named by client_event_id.
_STATUS: dict[Op, int] = {"create": 201, "event": 202}
_PARAM: dict[Op, str] = {"create": "client_request_id", "event": "client_event_id"}


def fingerprint(value: Any) -> str:
    """Identity of a submission: canonical JSON (sorted keys) — which fields were present counts."""
    raw = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def request_fingerprint(body: Json, op: Op) -> str:
    """Retry identity of a request body as sent. A create's ``stream`` is left out: it says how
    the answer is read, not what is asked."""
    if op == "create":
        return fingerprint({k: v for k, v in body.items() if k != "stream"})
    return fingerprint(body)


@dataclass(frozen=True)
class Replay:
    """The stored answer, given again. ``body`` is a copy (the caller adds the Items named by
    ``item_keys``); ``replayed`` says it was found by idempotency id (the HTTP answer says so in
    ``Idempotent-Replayed``), not by call id."""

    status: int
    body: Json
    item_keys: list[str]
    replayed: bool


def _replay(status: int, stored_body: Json, item_keys: list[str], replayed: bool) -> Replay:
    body = copy.deepcopy(stored_body)
    if status == 202:  # an event given again is not delivered again
        body["delivery"] = "duplicate"
    return Replay(status, body, item_keys, replayed)


def repeat(prior: Json, fingerprint: str, op: Op) -> Replay | ApiError:
    """A request whose idempotency id has the stored answer ``prior`` (its ``fingerprint``,
    ``body`` and ``item_keys``)."""
    if prior.get("fingerprint") != fingerprint:
        return errors.conflict(
            "a different request under this idempotency id is already stored", _PARAM[op])
    return _replay(_STATUS[op], prior["body"], list(prior.get("item_keys", [])), True)


def unknown_call() -> ApiError:
    return errors.not_found("the Session never issued this call", "call_id")


def result_repeat(call: Json | None, submission_fingerprint: str) -> Replay | ApiError | None:
    """A function result for ``call`` (the stored call, ``None`` if never issued): ``None`` when
    the call still waits for its result and the result is to be decided."""
    if call is None:
        return unknown_call()
    if call.get("submission") is None:
        return None
    if call.get("fingerprint") != submission_fingerprint:
        return errors.conflict("a different result for this call is already stored", "call_id")
    key = call.get("output_item_key")
    return _replay(202, call["answer"], [key] if key else [], False)

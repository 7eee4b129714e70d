"""What admission returns for a valid body: the values exactly as sent (defensive deep copies)
and their JSON-ready ``record()``; ``admitted_record(stamp)`` is the ``session.admitted/1`` record
admission hands to storage. Built by the envelope step; handed out only after the images and the
harness profile have passed too."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

from shared import records
from shared.domain.idempotency import fingerprint

MESSAGE_EVENT: Final = "agent.session.input.message"
TOOL_RESULT_EVENT: Final = "agent.session.input.tool_result"
EVENT_TYPES = (MESSAGE_EVENT, TOOL_RESULT_EVENT)


def _copy(value: Any) -> Any:
    """Deep copy of admitted (already plain) JSON, key order kept."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Envelope:
    """The optional fields every create/event body may carry (``null`` is stored as absent)."""

    metadata: dict[str, Any] | None
    tags: list[str] | None
    external_actor: dict[str, Any] | None

    def record(self) -> dict[str, Any]:
        return {
            "metadata": _copy(self.metadata),
            "tags": _copy(self.tags),
            "external_actor": _copy(self.external_actor),
        }


NO_ENVELOPE: Final = Envelope(None, None, None)


@dataclass(frozen=True, slots=True)
class Stamp:
    """What admission adds to an admitted body: the ids it minted, the time, the retry identity
    of the body as sent (``fingerprint``) and the tenant."""

    request_id: str
    session_id: str
    event_id: str
    admitted_at: str
    fingerprint: str
    tenant: str

    def head(self, op: str) -> dict[str, Any]:
        return {
            "schema": records.ADMITTED,
            "op": op,
            "request_id": self.request_id,
            "session_id": self.session_id,
            "event_id": self.event_id,
            "admitted_at": self.admitted_at,
            "fingerprint": self.fingerprint,
        }


class _Counted:
    """What every admitted body says about its images (``record()["has_images"]``)."""

    __slots__ = ()
    image_count: int

    @property
    def has_images(self) -> bool:
        return self.image_count > 0


@dataclass(frozen=True, slots=True)
class AdmittedCreate(_Counted):
    harness: str
    placement: str
    input: list[dict[str, Any]]  # the messages exactly as sent (a string input: one text message)
    input_was_string: bool
    stream: bool
    client_request_id: str | None
    envelope: Envelope
    image_count: int

    def record(self) -> dict[str, Any]:
        return {
            "harness": self.harness,
            "placement": self.placement,
            "input": _copy(self.input),
            "input_was_string": self.input_was_string,
            "stream": self.stream,
            "client_request_id": self.client_request_id,
            **self.envelope.record(),
            "has_images": self.has_images,
        }

    def admitted_record(self, stamp: Stamp) -> dict[str, Any]:
        """``session.admitted/1``, ``op: sessions.create`` (key order as on the topic)."""
        return {
            **stamp.head(records.OP_CREATE),
            "harness": self.harness,
            "placement": self.placement,
            "input_was_string": self.input_was_string,
            "stream": self.stream,
            "client_request_id": self.client_request_id,
            **self.envelope.record(),
            "has_images": self.has_images,
            "messages": _copy(self.input),
            "tenant": stamp.tenant,
        }


@dataclass(frozen=True, slots=True)
class AdmittedMessageEvent(_Counted):
    input: list[dict[str, Any]]
    client_event_id: str | None
    envelope: Envelope
    image_count: int
    type: Literal["agent.session.input.message"] = MESSAGE_EVENT

    def record(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "input": _copy(self.input),
            "client_event_id": self.client_event_id,
            **self.envelope.record(),
            "has_images": self.has_images,
        }

    def admitted_record(self, stamp: Stamp) -> dict[str, Any]:
        """``session.admitted/1``, ``op: events.create``, a message (key order as on the
        topic)."""
        return {
            **stamp.head(records.OP_EVENT),
            "client_event_id": self.client_event_id,
            **self.envelope.record(),
            "has_images": self.has_images,
            "event_type": self.type,
            "messages": _copy(self.input),
            "tenant": stamp.tenant,
        }


@dataclass(frozen=True, slots=True)
class AdmittedToolResult(_Counted):
    call_id: str
    success: bool
    output: str | list[dict[str, Any]] | None
    error: str | None
    fields_present: tuple[str, ...]  # which of "output" / "error" the body had, in sent order
    client_event_id: str | None
    envelope: Envelope
    image_count: int
    type: Literal["agent.session.input.tool_result"] = TOOL_RESULT_EVENT

    def submission(self) -> dict[str, Any]:
        """The result exactly as submitted: ``success`` and only the present ``output``/``error``
        (in the sent order)."""
        sub: dict[str, Any] = {"call_id": self.call_id, "success": self.success}
        for name in self.fields_present:
            sub[name] = _copy(self.output if name == "output" else self.error)
        return sub

    def identity(self) -> str:
        """Retry identity of the result (CONTRACT §1: an identical repeat is ``duplicate``, a
        different one 409): canonical JSON of ``submission()``. Presence matters: an absent
        ``output`` differs from ``"output": null``. Envelope fields are not part of it."""
        return json.dumps(
            self.submission(), sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )

    def record(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "call_id": self.call_id,
            "success": self.success,
            "output": _copy(self.output),
            "error": self.error,
            "fields_present": list(self.fields_present),
            "client_event_id": self.client_event_id,
            **self.envelope.record(),
            "has_images": self.has_images,
        }

    def admitted_record(self, stamp: Stamp) -> dict[str, Any]:
        """``session.admitted/1``, ``op: events.create``, a function result: the result as
        ``submission`` and its identity as ``submission_fingerprint`` (key order as on the
        topic)."""
        submission = self.submission()
        return {
            **stamp.head(records.OP_EVENT),
            "call_id": self.call_id,
            "fields_present": list(self.fields_present),
            "client_event_id": self.client_event_id,
            **self.envelope.record(),
            "has_images": self.has_images,
            "event_type": self.type,
            "submission": submission,
            "tenant": stamp.tenant,
            "submission_fingerprint": fingerprint(submission),
        }

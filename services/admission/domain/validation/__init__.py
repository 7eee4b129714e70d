"""Admission's one validator, used by the HTTP API and the ``session.input`` topic alike, so
both answer identically. Pure: no Kafka, store or HTTP import.

``validate_create(body, limits)`` and ``validate_event(body, harness, placement, limits)`` take
the parsed JSON body (whatever ``json.loads`` produced) and return either the admitted value —
a defensive deep copy of exactly what was sent, with a JSON-ready ``record()`` — or an
``ApiError``. They never raise for any input.

One pass, three steps, each in its own module and each calling only below itself; the first
failure is the answer (docs/admission.md, "Order of checks"):

1. ``envelope`` — the body's fields in the documented order, 400 ``invalid_request``; the
   content's field (``input``, ``output``) is walked by ``content`` where it comes;
2. ``content`` — the images per request (400), then each image's data in document order (400
   ``invalid_request`` / 413 ``request_too_large``);
3. ``profile`` — the Session's harness profile: placement, batch size, message images,
   whitespace-only messages, function results — 400 ``unsupported_or_invalid_configuration``.

So a request that is both malformed and unsupported is answered as malformed. The 413 for the
request body is the entry point's (it has the bytes): ``check_body_size``.
"""

from __future__ import annotations

from collections.abc import Mapping

from services.admission.domain.validation import content, envelope, profile
from services.admission.domain.validation.admitted import (
    EVENT_TYPES,
    MESSAGE_EVENT,
    TOOL_RESULT_EVENT,
    AdmittedCreate,
    AdmittedMessageEvent,
    AdmittedToolResult,
    Envelope,
    Stamp,
)
from services.admission.domain.validation.envelope import check_body_size
from services.admission.domain.validation.limits import Limits
from shared.domain.errors import ApiError, invalid
from shared.domain.harness import PROFILES, HarnessProfile

__all__ = [
    "EVENT_TYPES",
    "MESSAGE_EVENT",
    "TOOL_RESULT_EVENT",
    "AdmittedCreate",
    "AdmittedMessageEvent",
    "AdmittedToolResult",
    "Envelope",
    "Limits",
    "Stamp",
    "check_body_size",
    "validate_create",
    "validate_event",
]


def validate_create(
    body: object, limits: Limits, profiles: Mapping[str, HarnessProfile] = PROFILES
) -> AdmittedCreate | ApiError:
    """``POST /v1/sessions`` / ``op: sessions.create``. The Kafka entry point removes its envelope
    keys (``op``, ``request_id``) before calling this."""
    try:
        read = envelope.read_create(body, limits, profiles)
        if isinstance(read, ApiError):
            return read
        admitted, walk = read
        return content.check_images(walk, limits) or profile.check_messages(
            profiles, admitted.harness, admitted.placement, admitted.input,
            walk.first_image_part, walk.whitespace_candidates,
        ) or admitted
    except RecursionError:
        return invalid("request is nested too deeply", None)


def validate_event(
    body: object,
    harness: str,
    placement: str,
    limits: Limits,
    profiles: Mapping[str, HarnessProfile] = PROFILES,
) -> AdmittedMessageEvent | AdmittedToolResult | ApiError:
    """``POST /v1/sessions/{id}/events`` / ``op: events.create``; ``harness`` and ``placement``
    are the Session's. The Kafka entry point removes ``op``, ``request_id`` and ``session_id``
    before calling this."""
    try:
        read = envelope.read_event(body, limits)
        if isinstance(read, ApiError):
            return read
        admitted, walk = read
        if isinstance(admitted, AdmittedToolResult):
            return content.check_images(walk, limits) or profile.check_result(
                profiles, harness, placement, admitted.success, admitted.output
            ) or admitted
        return content.check_images(walk, limits) or profile.check_messages(
            profiles, harness, placement, admitted.input,
            walk.first_image_part, walk.whitespace_candidates,
        ) or admitted
    except RecursionError:
        return invalid("request is nested too deeply", None)

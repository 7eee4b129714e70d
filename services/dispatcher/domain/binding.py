"""The Runtime registry model and the binding choice, pure.

Core binds a Session to a Runtime by what the Runtime *reports* (its registration on
``runtime.registrations``), and checks the same report again at every delivery. The harness
profile (what admission accepts) is a different question; see docs/runtime-boundary.md.

Decisions:
* A Claude Code Runtime is eligible only with ``bridge_protocol`` in
  ``CLAUDE_BRIDGE_PROTOCOLS`` = {3} — exactly 3, not "≥ 3". The daemon requires protocol 3; an
  unknown future protocol is not known to keep protocol 3's guarantees (64-message bound,
  reject-before-submit, per-message UUIDs), so Core binds it only once the harness profile's
  ``bridge_protocols`` is extended.
* Alive = ``now - heartbeat_at <= heartbeat_timeout``; a status of ``gone`` or a missed
  heartbeat both mean gone. ``draining`` takes no new Sessions but keeps the ones it has.
* ``choose`` picks the least-loaded eligible Runtime; ties break by a rendezvous hash of
  (session_id, runtime_id) so equal Runtimes share Sessions evenly yet the choice is
  deterministic; without a session_id, ties break by ``runtime_id``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from shared.domain.harness import CLAUDE_CODE, HARNESSES
from shared.messages import schemas
from shared.messages.schemas import SEALING_ALG
from shared.records import parse_time
from shared.sealing import check_public

RuntimeStatus = Literal["ready", "draining", "gone"]
REGISTRATION_SCHEMA = schemas.REGISTRATION

# Bridge protocols Core's Claude Code adapter speaks (its harness profile's).
CLAUDE_BRIDGE_PROTOCOLS: frozenset[int] = CLAUDE_CODE.bridge_protocols or frozenset()

# Refusal codes returned (as the prefix of the reason) by ``check_delivery`` / ``ineligibility``.
MESSAGE_IMAGES_UNSUPPORTED = "message_images_unsupported"
FUNCTION_RESULT_IMAGES_UNSUPPORTED = "function_result_images_unsupported"


@dataclass(frozen=True, slots=True)
class RuntimeInfo:
    runtime_id: str
    harness: str
    placements: frozenset[str]
    bridge_protocol: int | None
    message_images: bool
    function_result_images: bool
    status: RuntimeStatus
    heartbeat_at: datetime
    # The Runtime process's own id, new at every start (an informative registration field):
    # a change under the same ``runtime_id`` is a restart, which lost the native Turns the
    # process ran (``Binder.sweep``). None: not reported.
    incarnation: str | None = None
    # The public key its deliveries are sealed to (``capabilities.sealed_deliveries``,
    # shared/sealing.py); None: delivered in clear, as CONTRACT §2 shows them.
    sealed_key: str | None = None


def from_registration(record: Mapping[str, Any]) -> RuntimeInfo:
    """A ``runtime.registration/1`` record → RuntimeInfo. Raises ``ValueError`` / ``KeyError`` /
    ``TypeError`` on a malformed record (the caller dead-letters it)."""
    if record.get("schema") != REGISTRATION_SCHEMA:
        raise ValueError(f"not a {REGISTRATION_SCHEMA} record: {record.get('schema')!r}")
    status = record["status"]
    if status not in ("ready", "draining", "gone"):
        raise ValueError(f"unknown runtime status {status!r}")
    caps = record.get("capabilities") or {}
    bridge = record.get("bridge_protocol")
    if bridge is not None and (isinstance(bridge, bool) or not isinstance(bridge, int)):
        raise TypeError(f"bridge_protocol must be an integer, got {bridge!r}")
    sealed = caps.get("sealed_deliveries")
    if sealed is not None and (not isinstance(sealed, dict) or sealed.get("alg") != SEALING_ALG):
        raise ValueError(f"capabilities.sealed_deliveries: expected {{alg: {SEALING_ALG!r}, "
                         "key}")
    placements = record["placements"]
    if not isinstance(placements, list) or not all(isinstance(p, str) for p in placements):
        raise TypeError("placements must be a list of strings")
    return RuntimeInfo(
        runtime_id=str(record["runtime_id"]),
        harness=str(record["harness"]),
        placements=frozenset(placements),
        bridge_protocol=bridge,
        # Only a literal ``true`` counts as reporting a capability.
        message_images=caps.get("message_images") is True,
        function_result_images=caps.get("function_result_images") is True,
        status=status,
        heartbeat_at=parse_time(record["heartbeat_at"]),
        incarnation=incarnation if isinstance(incarnation := record.get("incarnation"), str)
        and incarnation else None,
        sealed_key=check_public(sealed.get("key")) if sealed is not None else None,
    )


def is_alive(rt: RuntimeInfo, now: datetime, heartbeat_timeout: timedelta) -> bool:
    return rt.status != "gone" and now - rt.heartbeat_at <= heartbeat_timeout


def ineligibility(
    rt: RuntimeInfo,
    harness: str,
    placement: str,
    needs_message_images: bool,
    now: datetime,
    heartbeat_timeout: timedelta,
    can_seal: bool = True,
    must_seal: bool = False,
) -> str | None:
    """Why ``rt`` cannot take a new Session (``None`` when it can). ``can_seal``: Core holds a
    seal key; a Runtime that asks for sealed deliveries is never sent one in clear.
    ``must_seal``: only such Runtimes are bound (``require_sealed_deliveries``)."""
    if rt.harness != harness:
        return f"harness is {rt.harness}, not {harness}"
    if rt.status != "ready":
        return f"status is {rt.status}"
    if not is_alive(rt, now, heartbeat_timeout):
        return "missed heartbeats"
    if placement not in rt.placements:
        return f"placement {placement} not supported"
    if harness == "claude_code" and rt.bridge_protocol not in CLAUDE_BRIDGE_PROTOCOLS:
        return f"claude_code bridge protocol {rt.bridge_protocol} is not 3"
    if rt.sealed_key is not None and not can_seal:
        return "sealed_deliveries: asked for, and Core has no seal key (SESSION_CORE_SEAL_KEY)"
    if rt.sealed_key is None and must_seal:
        return "sealed_deliveries: required here, and the Runtime does not ask for them"
    if needs_message_images and not rt.message_images:
        return f"{MESSAGE_IMAGES_UNSUPPORTED}: does not report message image support"
    return None


def ready_by_harness(runtimes: Iterable[RuntimeInfo], now: datetime,
                     heartbeat_timeout: timedelta) -> dict[str, int]:
    """Runtimes that could take a new Session now, per known harness (0 for one without):
    eligible for their own harness in at least one of their placements (``ineligibility``:
    ``ready``, heartbeat in time, a Claude bridge protocol Core speaks), whatever the Session's
    images. A Runtime of a harness Core does not know is not counted (bounded labels)."""
    counts: dict[str, int] = dict.fromkeys(HARNESSES, 0)
    for rt in runtimes:
        if rt.harness in counts and any(
                ineligibility(rt, rt.harness, p, False, now, heartbeat_timeout) is None
                for p in rt.placements):
            counts[rt.harness] += 1
    return counts


def _tie_break(session_id: str | None, runtime_id: str) -> tuple[bytes, str]:
    if session_id is None:
        return (b"", runtime_id)
    digest = hashlib.blake2b(f"{session_id}\x00{runtime_id}".encode(), digest_size=8).digest()
    return (digest, runtime_id)


def choose(
    runtimes: Iterable[RuntimeInfo],
    load_by_runtime: Mapping[str, int],
    *,
    harness: str,
    placement: str,
    needs_message_images: bool,
    now: datetime,
    heartbeat_timeout: timedelta,
    session_id: str | None = None,
    can_seal: bool = True,
    must_seal: bool = False,
) -> RuntimeInfo | None:
    """The eligible Runtime with the fewest bound Sessions, or ``None`` (the Session waits)."""
    candidates = [
        rt
        for rt in runtimes
        if ineligibility(rt, harness, placement, needs_message_images, now,
                         heartbeat_timeout, can_seal, must_seal) is None
    ]
    if not candidates:
        return None
    return min(
        candidates,
        key=lambda rt: (
            load_by_runtime.get(rt.runtime_id, 0),
            _tie_break(session_id, rt.runtime_id),
        ),
    )


def check_delivery(rt: RuntimeInfo, kind: str, content_has_images: bool) -> str | None:
    """``None`` when ``rt`` can take this delivery, else the refusal reason.

    Messages (``start`` / ``steer``) with images need ``message_images``; a function result
    with images needs ``function_result_images``. Content without images is never refused
    here — only image-bearing content is checked."""
    if not content_has_images:
        return None
    if kind in ("start", "steer") and not rt.message_images:
        return (
            f"{MESSAGE_IMAGES_UNSUPPORTED}: runtime {rt.runtime_id} does not report message "
            "image support; the input carries images"
        )
    if kind == "function_result" and not rt.function_result_images:
        return (
            f"{FUNCTION_RESULT_IMAGES_UNSUPPORTED}: runtime {rt.runtime_id} does not report "
            "function-result image support; the result carries images"
        )
    return None

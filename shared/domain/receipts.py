"""Application receipts: exact native confirmation per harness, and the monotonic per-call
state machine. Pure: the receipt tracker service feeds observations, refusals and
timer expiries in, and publishes what comes out (through storage, the single Item writer).

Matching (``match_native``, the one dispatch point) returns a verdict value
(``shared.domain.receipt_types``): ``Confirmed``, ``Released`` or ``NotAMatch(field, reason)``.
Each harness's matcher sits with the rest of its knowledge: Claude Code's in
``shared.domain.harnesses.claude_code.match_receipt``, Codex's in
``shared.domain.harnesses.codex.match_receipt`` (their docstrings state the rules). The shared
types are re-exported here.

States: ``pending → applied | uncertain | failed``; terminal states never change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses import codex
from shared.domain.receipt_types import (
    CONFIRMED,
    RELEASED,
    Confirmed,
    Expected,
    NotAMatch,
    PartKey,
    PartKind,
    Released,
    Verdict,
    differs,
    digest,
    expect,
    joined_key,
    part_keys,
)
from shared.messages import schemas

__all__ = [
    "CALL_IDS",
    "CONFIRMED",
    "MATCHERS",
    "OBSERVATION_SCHEMA",
    "RECEIPT_WINDOW_S",
    "RELEASED",
    "TERMINAL",
    "CallRecord",
    "Confirmed",
    "Expected",
    "Log",
    "NotAMatch",
    "PartKey",
    "PartKind",
    "Publish",
    "Released",
    "State",
    "Step",
    "Verdict",
    "decidable_calls",
    "digest",
    "expect",
    "joined_key",
    "match_native",
    "match_observation",
    "part_keys",
]

OBSERVATION_SCHEMA = schemas.OBSERVATION
# The spec's receipt window; the service takes Settings.receipt_window_s (at most this).
RECEIPT_WINDOW_S = 10.0


def match_observation(expected: Expected, observation: Mapping[str, Any]) -> Verdict:
    """Match a whole ``runtime.observation/1`` envelope: the envelope's Core session and
    harness first, then the native record."""
    if observation.get("schema") != OBSERVATION_SCHEMA:
        return differs("schema", OBSERVATION_SCHEMA, observation.get("schema"))
    if observation.get("session_id") != expected.session_id:
        return differs("session", expected.session_id, observation.get("session_id"))
    if observation.get("harness") != expected.harness:
        return differs("harness", expected.harness, observation.get("harness"))
    native = observation.get("native")
    if not isinstance(native, Mapping):
        return NotAMatch("native", "native: not an object")
    return match_native(expected, native)


def decidable_calls(obs: Mapping[str, Any]) -> tuple[str, ...]:
    """The calls an observation could decide: a refusal's call, or the calls its native record
    could confirm or release (each harness's ``receipt_call_ids``). Only an observation with
    some is worth keeping for a delivery read later; chatter (agent messages, reasoning,
    replayed echoes, Subagent records) has none."""
    refusal = obs.get("refusal")
    if isinstance(refusal, Mapping):
        cid = refusal.get("call_id")
        return (cid,) if isinstance(cid, str) else ()
    native = obs.get("native")
    harness = obs.get("harness")
    if not isinstance(native, Mapping) or not isinstance(harness, str):
        return ()
    ids = CALL_IDS.get(harness)
    return ids(native) if ids is not None else ()


# harness → its receipt matcher (in its harness module); a harness without one has no
# application receipts
MATCHERS: Mapping[str, Callable[[Expected, Mapping[str, Any]], Verdict]] = {
    claude.HARNESS: claude.match_receipt,
    codex.HARNESS: codex.match_receipt,
}


# harness → the calls one of its records could decide
CALL_IDS: Mapping[str, Callable[[Mapping[str, Any]], tuple[str, ...]]] = {
    claude.HARNESS: claude.receipt_call_ids,
    codex.HARNESS: codex.receipt_call_ids,
}


def match_native(expected: Expected, native: Mapping[str, Any]) -> Verdict:
    matcher = MATCHERS.get(expected.harness)
    if matcher is None:
        return NotAMatch("harness", f"harness: {expected.harness!r} has no application receipts")
    return matcher(expected, native)


# --------------------------------------------------------------------------- states


class State(StrEnum):
    PENDING = "pending"
    APPLIED = "applied"
    UNCERTAIN = "uncertain"
    FAILED = "failed"


TERMINAL = frozenset({State.APPLIED, State.UNCERTAIN, State.FAILED})

REASON_APPLIED = "the harness recorded the result: the native receipt matched exactly"
REASON_TIMEOUT = "no matching native receipt within {window:g} s of delivery"
REASON_RELEASED = "the harness released the call without applying the result"
REASON_LATE = "the native receipt arrived {late:.3f} s after the {window:g} s window"
REASON_REFUSED = "the runtime refused the result: {reason}"


@dataclass(frozen=True, slots=True)
class Publish:
    """Publish one ``function_call_application`` Item (exactly once per call)."""

    call_id: str
    state: State
    reason: str


@dataclass(frozen=True, slots=True)
class Log:
    """Nothing to publish, but worth a log line (e.g. a confirmation after the window)."""

    call_id: str
    event: str
    state: State


Step = Publish | Log | None


@dataclass(slots=True)
class CallRecord:
    """The tracker's per-call record. ``handed_at`` and ``deadline`` are wall-clock epoch
    seconds (durable across restarts), set when the delivery is handed to the Runtime.

    The ordering rule: an observation printed before the result was handed over is not about
    this delivery — not its receipt, not its release — whatever it reads like (a harness
    cannot record an answer it has not been given)."""

    expected: Expected
    state: State = State.PENDING
    deadline: float | None = None
    handed_at: float | None = None
    reason: str | None = None
    window: float = RECEIPT_WINDOW_S
    # the Runtime the result was delivered to: only its observations are about this call (a
    # receipt, a release or a refusal from any other Runtime decides nothing); None: unknown
    runtime_id: str | None = None

    def from_its_runtime(self, obs: Mapping[str, Any]) -> bool:
        return self.runtime_id is None or obs.get("runtime_id") == self.runtime_id

    @property
    def call_id(self) -> str:
        return self.expected.call_id

    def _finish(self, state: State, reason: str) -> Publish:
        self.state = state
        self.reason = reason
        return Publish(self.expected.call_id, state, reason)

    def handed_over(self, now: float) -> float | None:
        """The delivery reached the Runtime: start the window. Returns the deadline to
        schedule, or ``None`` when there is nothing to schedule (terminal, or already set — a
        redelivery never extends the window)."""
        if self.state is not State.PENDING or self.deadline is not None:
            return None
        self.handed_at = now
        self.deadline = now + self.window
        return self.deadline

    def printed_before_delivery(self, at: float) -> bool:
        """The ordering rule: an observation printed at ``at`` predates the hand-over."""
        return self.handed_at is not None and at < self.handed_at

    def observe(self, verdict: Verdict, now: float) -> Step:
        """``now`` is when the observation was printed (its Kafka timestamp)."""
        if isinstance(verdict, NotAMatch) or self.printed_before_delivery(now):
            return None
        if self.state is not State.PENDING:
            if isinstance(verdict, Released):
                event = "release_after_terminal"
            elif self.state is State.UNCERTAIN and self.reason == REASON_RELEASED:
                event = "confirmation_after_release"  # logged; uncertain stays uncertain
            elif self.state is State.UNCERTAIN:
                event = "confirmation_after_window"  # logged; uncertain stays uncertain
            else:
                event = "confirmation_after_terminal"
            return Log(self.expected.call_id, event, self.state)
        if isinstance(verdict, Released):
            return self._finish(State.UNCERTAIN, REASON_RELEASED)
        if self.deadline is not None and now > self.deadline:
            late = now - self.deadline
            return self._finish(State.UNCERTAIN, REASON_LATE.format(late=late, window=self.window))
        return self._finish(State.APPLIED, REASON_APPLIED)

    def refused(self, reason: str) -> Step:
        if self.state is not State.PENDING:
            return Log(self.expected.call_id, "refusal_after_terminal", self.state)
        return self._finish(State.FAILED, REASON_REFUSED.format(reason=reason))

    def expire(self, now: float) -> Step:
        """The timer fired. Only a pending call whose deadline has passed turns uncertain."""
        if self.state is not State.PENDING or self.deadline is None or now < self.deadline:
            return None
        return self._finish(State.UNCERTAIN, REASON_TIMEOUT.format(window=self.window))

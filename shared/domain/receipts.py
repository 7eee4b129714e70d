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

__all__ = [
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
    "digest",
    "expect",
    "joined_key",
    "match_native",
    "match_observation",
    "may_decide",
    "part_keys",
]

OBSERVATION_SCHEMA = "runtime.observation/1"
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


def may_decide(obs: Mapping[str, Any]) -> bool:
    """Whether an observation can decide some call (a refusal, a tool result, a release):
    only those are kept for a delivery read later, so a backlog of chatter cannot crowd out
    a receipt."""
    native = obs.get("native")
    if isinstance(obs.get("refusal"), dict):
        return True
    if not isinstance(native, Mapping):
        return False
    if native.get("type") in ("user", "tool_release"):
        return True
    return native.get("method") in ("item/completed", "item/released")


# harness → its receipt matcher (in its harness module); a harness without one has no
# application receipts
MATCHERS: Mapping[str, Callable[[Expected, Mapping[str, Any]], Verdict]] = {
    claude.HARNESS: claude.match_receipt,
    codex.HARNESS: codex.match_receipt,
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
    """The tracker's per-call record. ``deadline`` is wall-clock epoch seconds (durable across
    restarts), set when the delivery is handed to the Runtime."""

    expected: Expected
    state: State = State.PENDING
    deadline: float | None = None
    reason: str | None = None
    window: float = RECEIPT_WINDOW_S

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
        self.deadline = now + self.window
        return self.deadline

    def observe(self, verdict: Verdict, now: float) -> Step:
        if isinstance(verdict, NotAMatch):
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

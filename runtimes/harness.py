"""The simulated harness behind the reference Runtime: pure, deterministic, no I/O.

``SimulatedHarness.handle(delivery, now)`` takes one ``runtime.delivery/1`` record and returns
the ``runtime.observation/1`` records the harness would produce (each with a delay, for the
``receipt_delay_s`` switch); ``tick(now)`` ends the Turns that went idle. The Runtime service
publishes what comes out; tests call these two methods directly.

The records each harness prints are its own module's (``SHAPES``: ``codex.simulated``,
``claude.simulated``, ``minimax.simulated`` under ``runtimes/``); this class keeps the
Sessions, Turns and calls and applies the switches.

The echo model, per Core Session (one native thread / session id) and per Core Turn (one native
turn id):

* ``start`` / ``steer``: the messages are encoded by the project's adapter for the harness
  (Codex flattens the batch; Claude Code makes one native user message per public message, with a
  UUID, counted toward the 64-message bound; MiniMax Code is text-only). The harness records the
  input it received (Codex ``item/completed`` ``userMessage``; Claude Code the user message
  echoed back as ``isReplay: true``, as ``--replay-user-messages`` does) and answers with an
  assistant text ``echo: …``.
* A text part containing ``call <name> <json-object>`` makes the harness call that function
  (Codex ``item/started`` ``dynamicToolCall``; Claude Code assistant ``tool_use``); the Turn then
  stays open until the result arrives.
* ``function_result``: the result is applied and recorded natively (Codex ``item/completed``;
  Claude Code a user record with one ``tool_result`` block), then the Turn ends once no call is
  pending.
* A Turn with nothing pending ends ``turn_idle_s`` after its last input, so steering can join it.
* What the harness cannot take it refuses with a terminal refusal record (``native: null``):
  images for a text-only harness or a Runtime that does not report the capability, a Claude Code
  batch over the per-Turn bound (which also ends the Turn), a result for a call that is not
  pending, and every result under ``refuse_results``.
* ``interrupt`` (Core failed the Turn) ends the running Turn as failed, with Core's reason.
* A Turn that ends while calls are pending (a new ``start`` supersedes it, or it fails) releases
  those calls natively first.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from cachetools import FIFOCache

from runtimes.claude.simulated import ClaudeShapes
from runtimes.codex.simulated import CodexShapes
from runtimes.minimax.simulated import MinimaxShapes
from runtimes.simulation import (
    ALTERED_SUFFIX,
    OBSERVATION_SCHEMA,
    SYNTHETIC_TEXT,
    Call,
    Emit,
    Json,
    NativeShapes,
    NewHex,
    Session,
    Turn,
    parse_calls,
)
from runtimes.switches import Switches
from shared import records
from shared.domain.harnesses import AdapterError
from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses.errors import TurnBoundExceeded
from shared.domain.wire import REFUSAL_TURN_BOUND_EXCEEDED, REFUSAL_TURN_ENDED
from shared.logging import get_logger

log = get_logger(__name__)

# harness → the native records its simulation prints
SHAPES: dict[str, Callable[[NewHex], NativeShapes]] = {
    CodexShapes.harness: CodexShapes,
    ClaudeShapes.harness: ClaudeShapes,
    MinimaxShapes.harness: MinimaxShapes,
}
HARNESSES = tuple(SHAPES)
_SEEN_DELIVERIES = 10_000


class SimulatedHarness:
    def __init__(
        self,
        *,
        runtime_id: str,
        harness: str,
        switches: Switches | None = None,
        turn_idle_s: float = 1.5,
        message_images: bool = True,
        function_result_images: bool = True,
        max_user_messages: int = claude.MAX_USER_MESSAGES_PER_TURN,
        new_hex: Callable[[], str] | None = None,
    ) -> None:
        if harness not in HARNESSES:
            raise ValueError(f"unknown harness {harness!r}; one of {', '.join(HARNESSES)}")
        self.runtime_id = runtime_id
        self.harness = harness
        self.switches = switches or Switches()
        self.turn_idle_s = turn_idle_s
        self._new_hex = new_hex or (lambda: uuid.uuid4().hex)
        self.native = SHAPES[harness](self._new_hex)
        self.message_images = message_images and not self.native.text_only
        self.function_result_images = function_result_images and not self.native.text_only
        self.max_user_messages = max_user_messages
        self.sessions: dict[str, Session] = {}
        self._seen: FIFOCache[str, None] = FIFOCache(_SEEN_DELIVERIES)

    # ------------------------------------------------------------------ public

    def handle(self, delivery: Mapping[str, Any], now: float) -> list[Emit]:
        if delivery.get("runtime_id") != self.runtime_id:
            return []
        delivery_id = str(delivery.get("delivery_id"))
        if delivery_id in self._seen:
            log.info("delivery.duplicate", delivery_id=delivery_id)
            return []
        self._seen[delivery_id] = None
        sid = str(delivery.get("session_id"))
        session = self.sessions.get(sid)
        if session is None:
            session = Session(sid, self.native.session_id())
            self.sessions[sid] = session
        kind = delivery.get("kind")
        if kind in ("start", "steer"):
            return self._messages(session, delivery, now)
        if kind == "function_result":
            return self._function_result(session, delivery, now)
        if kind == "interrupt":
            # Core failed this Turn: it ends natively (its pending calls released, then its
            # failed end with Core's reason). A Turn not running here: nothing to end, but it
            # is over — a later steer of it is refused ``turn_ended``, not run as a new Turn.
            turn = session.turn
            if turn is None or turn.core_turn_id != delivery.get("turn_id"):
                session.ended_turns[str(delivery.get("turn_id"))] = None
                return []
            return self._end_turn(session, failed=True,
                                  end_reason=str(delivery.get("reason") or "interrupted"))
        return [self._refusal(session, delivery, f"unknown delivery kind {kind!r}")]

    def tick(self, now: float) -> list[Emit]:
        """End every Turn with nothing pending whose last input is ``turn_idle_s`` old."""
        out: list[Emit] = []
        for session in self.sessions.values():
            turn = session.turn
            if turn is not None and not turn.pending and now - turn.last_input >= self.turn_idle_s:
                out += self._end_turn(session, failed=False)
        return out

    def next_deadline(self) -> float | None:
        deadlines = [
            s.turn.last_input + self.turn_idle_s
            for s in self.sessions.values()
            if s.turn is not None and not s.turn.pending
        ]
        return min(deadlines) if deadlines else None

    def set_switches(self, switches: Switches) -> None:
        self.switches = switches

    # ------------------------------------------------------------------ ids and envelopes

    def _envelope(self, session: Session, turn_id: str | None, native: Json | None) -> Json:
        return records.observation_record(
            runtime_id=self.runtime_id, session_id=session.core_session_id,
            harness=self.harness, native=native, turn_id=turn_id,
            observation_id=f"obs_{self._new_hex()}")

    def _emit(self, session: Session, turn: Turn | None, native: Json, delay: float = 0.0
              ) -> Emit:
        return Emit(self._envelope(session, turn.core_turn_id if turn else None, native), delay)

    def _refusal(
        self,
        session: Session,
        delivery: Mapping[str, Any],
        reason: str,
        call_id: str | None = None,
        code: str | None = None,
    ) -> Emit:
        refusal: Json = {
            "delivery_id": delivery.get("delivery_id"),
            "kind": delivery.get("kind"),
            "reason": reason,
            "terminal": True,
        }
        if code is not None:
            refusal["code"] = code
        if call_id is not None:
            refusal["call_id"] = call_id
        record = self._envelope(session, _str_or_none(delivery.get("turn_id")), None)
        record["refusal"] = refusal
        log.warning(
            "delivery.refused",
            session_id=session.core_session_id,
            call_id=call_id,
            kind=delivery.get("kind"),
            reason=reason,
        )
        return Emit(record)

    # ------------------------------------------------------------------ turns

    def _open_turn(self, session: Session, core_turn_id: str, now: float) -> tuple[Turn, Emit]:
        session.turns_started += 1
        turn = self.native.open_turn(session, core_turn_id, now, self.max_user_messages)
        session.turn = turn
        started = self.native.started(session, turn)
        log.info("turn.started", session_id=session.core_session_id, turn_id=core_turn_id)
        return turn, self._emit(session, turn, started)

    def _end_turn(self, session: Session, *, failed: bool, delay: float = 0.0,
                  end_reason: str | None = None) -> list[Emit]:
        """End the native Turn: release its pending calls, then its end record. ``end_reason``
        (the bridge ended the Turn itself, e.g. the 64-message bound) travels on the end
        record's envelope; Core's failed ``turn`` Item gives it as its reason."""
        turn = session.turn
        if turn is None:
            return []
        out: list[Emit] = []
        for call in list(turn.pending.values()):
            out.append(self._emit(session, turn, self._release(session, turn, call), delay))
            log.info("call.released", session_id=session.core_session_id, call_id=call.call_id,
                     why="the turn ended with the call pending")
        turn.pending.clear()
        failed = failed or self.switches.fail_turns
        end = self.native.end(session, turn, failed)
        ended = self._emit(session, turn, end, delay)
        if end_reason is not None:
            ended.record["end_reason"] = end_reason
        out.append(ended)
        if turn.claude is not None:
            turn.claude.finish("failed" if failed else "completed")
        session.ended_turns[turn.core_turn_id] = None
        session.turn = None
        log.info("turn.ended", session_id=session.core_session_id, turn_id=turn.core_turn_id,
                 state="failed" if failed else "completed")
        return out

    def _release(self, session: Session, turn: Turn, call: Call) -> Json:
        return self.native.release(session, turn, call)

    # ------------------------------------------------------------------ messages

    def _messages(self, session: Session, delivery: Mapping[str, Any], now: float
                  ) -> list[Emit]:
        turn_id = str(delivery.get("turn_id"))
        messages = delivery.get("messages")
        if not isinstance(messages, list) or not messages:
            return [self._refusal(session, delivery, "a message delivery needs messages")]
        out: list[Emit] = []
        turn = session.turn
        if turn is not None and turn.core_turn_id == turn_id and delivery.get("kind") == "steer":
            opening = False
        elif turn_id in session.ended_turns:
            return [self._refusal(session, delivery, f"the native turn of {turn_id} has ended",
                                  code=REFUSAL_TURN_ENDED)]
        else:
            # A start (or a steer for a Turn this harness never saw) opens a new native Turn; a
            # Turn still running is superseded (its pending calls are released).
            if turn is not None:
                out += self._end_turn(session, failed=False)
            turn, started = self._open_turn(session, turn_id, now)
            out.append(started)
            opening = True

        # A text-only harness's adapter refuses images itself (below); a harness that could take
        # them refuses here when the Runtime does not report the capability.
        if (
            not self.native.text_only
            and not self.message_images
            and any(p.get("type") == "input_image" for m in messages for p in m.get("content", ()))
        ):
            reason = "unsupported_content: this runtime does not report message image support"
            out.append(self._refusal(session, delivery, reason))
            if opening:
                out += self._end_turn(session, failed=True)
            return out

        received = self.native.encode(session, turn, delivery, messages, opening)
        if isinstance(received, TurnBoundExceeded):
            # Seed 000: the bridge rejects the batch before submitting any part of it, which
            # ends the running Turn. The refusal says so (its code); the end is observed.
            why = f"{received.code}: {received.message}; nothing of it was submitted"
            out.append(self._refusal(session, delivery, why, code=REFUSAL_TURN_BOUND_EXCEEDED))
            out += self._end_turn(session, failed=True, end_reason=why)
            return out
        if isinstance(received, AdapterError):
            out.append(self._refusal(session, delivery, f"{received.code}: {received.message}"))
            if opening:
                out += self._end_turn(session, failed=True)
            return out
        out += [self._emit(session, turn, native) for native in received]
        turn.last_input = now

        texts = [p["text"] for m in messages for p in m.get("content", ())
                 if p.get("type") == "input_text"]
        images = sum(1 for m in messages for p in m.get("content", ())
                     if p.get("type") == "input_image")
        echo = "echo: " + " | ".join(texts)
        if images:
            echo += f" [+{images} image{'s' if images != 1 else ''}]"
        out.append(self._emit(session, turn, self.native.assistant_text(session, turn, echo)))
        if not self.native.text_only:  # MiniMax Code has no public functions
            for text in texts:
                for name, args in parse_calls(text):
                    out.append(self._emit(session, turn, self._call(session, turn, name, args)))
        return out

    def _call(self, session: Session, turn: Turn, name: str, args: Any) -> Json:
        call = Call(self.native.call_id(), name, args)
        turn.pending[call.call_id] = call
        log.info("call.opened", session_id=session.core_session_id, call_id=call.call_id,
                 name=name)
        return self.native.call(session, turn, call)

    # ------------------------------------------------------------------ function results

    def _function_result(self, session: Session, delivery: Mapping[str, Any], now: float
                         ) -> list[Emit]:
        call_id = str(delivery.get("call_id"))
        success = delivery.get("success") is True
        content = delivery.get("content")
        if not isinstance(content, list):
            content = []
        turn = session.turn
        call = turn.pending.get(call_id) if turn is not None else None
        if turn is None or call is None:
            return [self._refusal(session, delivery, f"no pending call {call_id}: the harness "
                                  "is not waiting for this result", call_id)]
        sw = self.switches
        if sw.refuse_results:
            turn.pending.pop(call_id)
            return [
                self._refusal(session, delivery, "the harness refused the result "
                              "(refuse_results)", call_id),
                *self._end_turn(session, failed=True),
            ]
        if not self.function_result_images and any(
            p.get("type") == "input_image" for p in content
        ):
            turn.pending.pop(call_id)
            return [
                self._refusal(session, delivery, "unsupported_content: this runtime does not "
                              "report function-result image support", call_id),
                *self._end_turn(session, failed=True),
            ]
        applied = self.native.apply(session, turn, call, success, content, self.switches)
        if isinstance(applied, AdapterError):
            turn.pending.pop(call_id)
            return [
                self._refusal(session, delivery, f"{applied.code}: {applied.message}", call_id),
                *self._end_turn(session, failed=True),
            ]
        turn.pending.pop(call_id)
        turn.last_input = now
        delay = sw.receipt_delay_s
        log.info("call.result", session_id=session.core_session_id, call_id=call_id,
                 success=success, delay_s=delay, switches=sw.active())
        out = [self._emit(session, turn, applied, delay)]
        if not turn.pending:
            out += self._end_turn(session, failed=False, delay=delay)
        return out


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


__all__ = [
    "ALTERED_SUFFIX",
    "HARNESSES",
    "OBSERVATION_SCHEMA",
    "SYNTHETIC_TEXT",
    "Emit",
    "SimulatedHarness",
    "parse_calls",
]

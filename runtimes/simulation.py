"""What every simulated harness shares: the observation it emits, the Session / Turn / call state
the reference Runtime keeps, the echo model's ``call <name> {…}`` parser, the misbehaviour
switches' content tampering, and ``NativeShapes`` — the records one harness prints, implemented
per harness (``runtimes.codex.simulated``, ``…claude.simulated``,
``…minimax.simulated``). ``runtimes.harness.SimulatedHarness`` drives them."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cachetools import FIFOCache

from runtimes.switches import Switches
from shared import records
from shared.domain.harnesses import AdapterError
from shared.domain.harnesses.claude_code import ClaudeTurn

OBSERVATION_SCHEMA = records.OBSERVATION
ALTERED_SUFFIX = " [altered]"  # the alter_text mark (switch, and conformance's broken adapter)
SYNTHETIC_TEXT = "the harness aborted this call (synthetic record)"

_CALL_RE = re.compile(r"\bcall\s+([A-Za-z_][A-Za-z0-9_.\-]*)\s*(?=\{)")

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Emit:
    """One observation envelope to publish ``delay_s`` seconds after the call that made it.
    ``observed_at`` is left out: the outbox stamps it when it takes the record from its queue."""

    record: Json
    delay_s: float = 0.0


def parse_calls(text: str) -> list[tuple[str, Any]]:
    """Every ``call <name> <json-object>`` in ``text``, in order. A name not followed by a
    valid JSON object is not a call."""
    out: list[tuple[str, Any]] = []
    decoder = json.JSONDecoder()
    for m in _CALL_RE.finditer(text):
        try:
            args, _ = decoder.raw_decode(text, m.end())
        except ValueError:
            continue
        if isinstance(args, dict):
            out.append((m.group(1), args))
    return out


def uuid_from_hex(hex32: str) -> str:
    return str(uuid.UUID(hex=hex32))


@dataclass
class Call:
    call_id: str
    name: str
    arguments: Any


@dataclass
class Turn:
    core_turn_id: str
    native_turn_id: str
    last_input: float
    claude: ClaudeTurn | None = None
    pending: dict[str, Call] = field(default_factory=dict)


@dataclass
class Session:
    core_session_id: str
    native_id: str  # Codex threadId / Claude Code session_id / MiniMax session id
    turn: Turn | None = None
    ended_turns: FIFOCache[str, None] = field(default_factory=lambda: FIFOCache(1000))
    turns_started: int = 0


class NativeShapes(Protocol):
    """The native records one simulated harness prints. ``new_hex`` (given at construction)
    makes every id; the order of its calls is part of the behaviour tests pin."""

    harness: str
    text_only: bool

    def session_id(self) -> str: ...

    def call_id(self) -> str: ...

    def open_turn(self, session: Session, core_turn_id: str, now: float,
                  max_user_messages: int) -> Turn: ...

    def started(self, session: Session, turn: Turn) -> Json: ...

    def end(self, session: Session, turn: Turn, failed: bool) -> Json: ...

    def release(self, session: Session, turn: Turn, call: Call) -> Json: ...

    def encode(self, session: Session, turn: Turn, delivery: Mapping[str, Any],
               messages: Sequence[Mapping[str, Any]], opening: bool
               ) -> list[Json] | AdapterError: ...

    def assistant_text(self, session: Session, turn: Turn, text: str) -> Json: ...

    def call(self, session: Session, turn: Turn, call: Call) -> Json: ...

    def apply(self, session: Session, turn: Turn, call: Call, success: bool,
              content: Sequence[Mapping[str, Any]], sw: Switches) -> Json | AdapterError: ...


NewHex = Callable[[], str]


class ShapesBase:
    """What every ``NativeShapes`` keeps: the id source."""

    harness: str
    text_only = False

    def __init__(self, new_hex: NewHex) -> None:
        self._new_hex = new_hex


def misbehave_blocks(
    blocks: list[Json], sw: Switches, text_type: str, image_type: str
) -> list[Json]:
    out = [b for b in blocks if not (sw.drop_image and b.get("type") == image_type)]
    if sw.alter_text:
        for i, b in enumerate(out):
            if b.get("type") == text_type:
                out[i] = {**b, "text": b["text"] + ALTERED_SUFFIX}
                break
        else:
            out.append({"type": text_type, "text": ALTERED_SUFFIX.strip()})
    return out

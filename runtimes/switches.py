"""Misbehaviour switches of the reference Runtime: the ways real harnesses go wrong.

One place for the names, their types and their parsing, shared by the CLI flags
(``--alter-text``, ``--receipt-delay-s 12``…), the environment
(``SESSION_CORE_RUNTIME_ALTER_TEXT=true``…) and ``runtime.control/1`` records
(``{"set": {"alter_text": true}}``). All switches are off by default: the reference Runtime then
behaves like a correct harness.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

ENV_PREFIX = "SESSION_CORE_RUNTIME_"

# name → what it does (docs/reference-runtime.md repeats this table)
DESCRIPTIONS: dict[str, str] = {
    "receipt_delay_s": "emit the native result record (and the Turn's end) this many seconds late",
    "release_calls": "release every function call natively instead of applying its result",
    "replay": "emit the result record as a replay (Claude isReplay; Codex: a foreign turnId)",
    "synthetic": "emit a synthetic record instead of the result (Claude isSynthetic; Codex: "
    "an aborted item/completed)",
    "subagent": "emit the result record from a Subagent (Claude parent_tool_use_id; Codex: a "
    "child threadId)",
    "alter_text": "change the text of the result (appends ' [altered]' to the first text block)",
    "drop_image": "drop every image block from the result",
    "refuse_results": "refuse every function result (a refusal record, the Turn fails)",
    "fail_turns": "end every Turn with a failed status",
}


@dataclass(frozen=True, slots=True)
class Switches:
    receipt_delay_s: float = 0.0
    release_calls: bool = False
    replay: bool = False
    synthetic: bool = False
    subagent: bool = False
    alter_text: bool = False
    drop_image: bool = False
    refuse_results: bool = False
    fail_turns: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def active(self) -> dict[str, Any]:
        """Only the switches that differ from the correct behaviour."""
        default = Switches()
        return {k: v for k, v in self.as_dict().items() if getattr(default, k) != v}

    def updated(self, changes: Mapping[str, Any]) -> Switches:
        """A copy with ``changes`` applied; ``ValueError`` names an unknown switch or a bad
        value (nothing is applied then)."""
        parsed = {name: parse_value(name, value) for name, value in changes.items()}
        return replace(self, **parsed)


NAMES: tuple[str, ...] = tuple(f.name for f in fields(Switches))
_FLOATS = frozenset({"receipt_delay_s"})

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def parse_value(name: str, value: Any) -> Any:
    if name not in NAMES:
        raise ValueError(f"unknown switch {name!r}; known: {', '.join(NAMES)}")
    if name in _FLOATS:
        if isinstance(value, bool):
            raise ValueError(f"{name} takes a number of seconds, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name} takes a number of seconds, got {value!r}") from None
        if number < 0:
            raise ValueError(f"{name} must not be negative, got {value!r}")
        return number
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f"{name} takes true or false, got {value!r}")


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``["alter_text=true", "receipt_delay_s=12"]`` → a parsed change set."""
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip().replace("-", "_")
        out[name] = parse_value(name, value if sep else "true")
    return out


def from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name in NAMES:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            out[name] = parse_value(name, raw)
    return out

"""Scripts for the scripted model server (pure: no HTTP here).

A *script* is registered under a ``key``: a string that the test puts in the conversation (for
example in the first user message). Every model request whose body contains the key is answered
by that script's next *reply*; a request no script matches gets ``DEFAULT_REPLY``. A conversation
re-sends its history on every request, so the key keeps matching for the whole Session.

A reply is a list of steps, answered in order inside one model response:

* ``{"text": "…"}`` — assistant text;
* ``{"tool_call": {"name": "…", "arguments": {…}, "call_id": "optional"}}`` — call a tool
  (the name is the public function name; each API module maps it to the harness's tool name);
* ``{"wait": seconds}`` — sleep before answering (a slow model);
* ``{"fail": {"status": 500, "message": "…"}}`` — answer an HTTP error instead.

When a script runs out of replies, later requests get ``DEFAULT_REPLY``.
Every request is recorded (``RequestLog``) so tests assert what the model really received.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

Step = dict[str, Any]
Reply = list[Step]

DEFAULT_REPLY: Reply = [{"text": "ok"}]
STEP_KINDS = ("text", "tool_call", "wait", "fail")


class ScriptError(ValueError):
    """A script that cannot be played (unknown step kind, wrong field types)."""


def check_reply(reply: Any) -> Reply:
    if not isinstance(reply, list) or not reply:
        raise ScriptError("a reply is a non-empty list of steps")
    for i, step in enumerate(reply):
        if not isinstance(step, dict) or len(step) != 1 or next(iter(step)) not in STEP_KINDS:
            raise ScriptError(f"step {i}: one of {STEP_KINDS}, got {step!r}")
        kind, value = next(iter(step.items()))
        if kind == "text" and not isinstance(value, str):
            raise ScriptError(f"step {i}: text must be a string")
        if kind == "tool_call" and not (
                isinstance(value, dict) and isinstance(value.get("name"), str)):
            raise ScriptError(f"step {i}: tool_call needs a name")
        if kind == "wait" and not isinstance(value, int | float):
            raise ScriptError(f"step {i}: wait is a number of seconds")
        if kind == "fail" and not (
                isinstance(value, dict) and isinstance(value.get("status"), int)):
            raise ScriptError(f"step {i}: fail needs an HTTP status")
    return reply


@dataclass
class Script:
    key: str
    replies: list[Reply]
    played: int = 0

    def next_reply(self) -> Reply | None:
        if self.played >= len(self.replies):
            return None
        reply = self.replies[self.played]
        self.played += 1
        return reply


@dataclass
class RecordedRequest:
    api: str  # "responses" | "messages"
    path: str
    body: dict[str, Any]
    script_key: str | None
    at: float = field(default_factory=time.time)
    side: bool = False  # a harness's own side request (title, quota...): answered, no script

    def as_json(self) -> dict[str, Any]:
        return {"api": self.api, "path": self.path, "body": self.body,
                "script_key": self.script_key, "at": self.at, "side": self.side}


class Scripts:
    """The registry and the request log; thread-safe (the server may run in a thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, Script] = {}
        self.requests: list[RecordedRequest] = []

    def register(self, key: str, replies: list[Any]) -> None:
        if not key:
            raise ScriptError("a script needs a non-empty key")
        checked = [check_reply(r) for r in replies]
        with self._lock:
            self._scripts[key] = Script(key, checked)

    def match(self, raw_body: str) -> Script | None:
        """The script whose key occurs in the request body (the longest key wins a tie)."""
        with self._lock:
            found = [s for k, s in self._scripts.items() if k in raw_body]
        return max(found, key=lambda s: len(s.key)) if found else None

    def take(self, api: str, path: str, raw_body: str, body: dict[str, Any],
             side: bool = False) -> Reply:
        """Record the request and return the reply to play."""
        script = None if side else self.match(raw_body)
        with self._lock:
            self.requests.append(RecordedRequest(api, path, body, script.key if script else None,
                                                 side=side))
            reply = script.next_reply() if script else None
        return reply if reply is not None else DEFAULT_REPLY

    def recorded(self, key: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if key is None or r.script_key == key]

"""Scripts for the scripted model server (pure: no HTTP here).

A *script* is registered under a ``key``: a string that the test puts in the conversation (for
example in the first user message). Every model request whose body contains the key is answered
by that script's next *reply*; a request no script matches gets ``DEFAULT_REPLY``. A conversation
re-sends its history on every request, so the key keeps matching for the whole Session.

A reply is a list of steps, answered in order inside one model response:

* ``{"text": "…"}`` — assistant text;
* ``{"message": {"text": "…", "phase": "commentary" | "final_answer"}}`` — assistant text with
  the Responses API's ``phase`` on its message item (the Messages API has none: plain text);
* ``{"tool_call": {"name": "…", "arguments": {…}, "call_id": "optional", "namespace":
  "optional"}}`` — call a tool
  (the name is the public function name; each API module maps it to the harness's tool name);
* ``{"wait": seconds}`` — sleep before answering (a slow model);
* ``{"fail": {"status": 500, "message": "…"}}`` — answer an HTTP error instead.

When a script runs out of replies, later requests get ``DEFAULT_REPLY``.
Every request is recorded (``RecordedRequest``) so tests assert what the model really received,
with the token usage the model reported for it (``token_usage``: deterministic, never zero, a
part of the input counted as cached) so tests compare a Turn's usage with what was reported.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

Step = dict[str, Any]
Reply = list[Step]

DEFAULT_REPLY: Reply = [{"text": "ok"}]
STEP_KINDS = ("text", "message", "tool_call", "wait", "fail")


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
        if kind == "message" and not (
                isinstance(value, dict) and isinstance(value.get("text"), str)):
            raise ScriptError(f"step {i}: message needs a text")
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


def token_usage(raw_body: str, reply: Reply) -> dict[str, int]:
    """The usage the scripted model reports for one answer: ``input_tokens`` about a quarter of
    the request's characters, a quarter of those ``cached_input_tokens``, ``output_tokens`` a
    quarter of the reply's characters — each at least 1."""
    n = max(4, len(raw_body) // 4)
    out = sum(len(str(v)) for step in reply for v in step.values())
    return {"input_tokens": n, "cached_input_tokens": n // 4,
            "output_tokens": max(1, out // 4)}


@dataclass
class RecordedRequest:
    api: str  # "responses" | "messages"
    path: str
    body: dict[str, Any]
    script_key: str | None
    at: float = field(default_factory=time.time)
    side: bool = False  # a harness's own side request (title, quota...): answered, no script
    usage: dict[str, int] = field(default_factory=dict)  # what the answer reported

    def as_json(self) -> dict[str, Any]:
        return {"api": self.api, "path": self.path, "body": self.body,
                "script_key": self.script_key, "at": self.at, "side": self.side,
                "usage": self.usage}


class Scripts:
    """The registry and the request log; thread-safe (the server may run in a thread).
    ``log``: a file every recorded request is also appended to (one JSON line, flushed before
    the answer is played), so the log outlives a killed server."""

    def __init__(self, log: str | None = None) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, Script] = {}
        self.requests: list[RecordedRequest] = []
        self._log = open(log, "a", encoding="utf-8") if log else None

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
        return self.take_with_usage(api, path, raw_body, body, side)[0]

    def take_with_usage(self, api: str, path: str, raw_body: str, body: dict[str, Any],
                        side: bool = False) -> tuple[Reply, dict[str, int]]:
        """``take``, and the usage to report for the answer (recorded with the request)."""
        script = None if side else self.match(raw_body)
        with self._lock:
            reply = script.next_reply() if script else None
            reply = reply if reply is not None else DEFAULT_REPLY
            usage = token_usage(raw_body, reply)
            rec = RecordedRequest(api, path, body, script.key if script else None, side=side,
                                  usage=usage)
            self.requests.append(rec)
            if self._log is not None:
                self._log.write(json.dumps(rec.as_json()) + "\n")
                self._log.flush()
        return reply, usage

    def recorded(self, key: str | None = None) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if key is None or r.script_key == key]

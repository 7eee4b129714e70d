"""Application receipts: exact native confirmation per harness, and the monotonic per-call
state machine. Pure: the receipt tracker service feeds observations, refusals and
timer expiries in, and publishes what comes out (through storage, the single Item writer).

Matching (``match_native``) returns a verdict value:
* ``Confirmed`` — the observation is the harness's record that it applied exactly this result;
* ``Released`` — the harness released this call without applying it;
* ``NotAMatch(field, reason)`` — anything else; ``field`` names the first rule that failed.

Claude Code confirms with a ``type: "user"`` record that is live (``isReplay`` false/absent),
not synthetic (``isSynthetic`` false/absent), root (``parent_tool_use_id`` null/absent), of the
native session recorded when the call was announced, holding exactly one ``tool_result`` block
for the call whose ``is_error`` is ``not success`` (absent = false, as in the Messages API) and
whose content blocks match the delivered content list in count and order: a ``text`` block with
exactly the same text at every text position, an ``image`` block at every image position (the
harness may re-encode images, so the image bytes are not compared). The real Claude Code
2.1.328 prints a *failed* result (``is_error: true``) with its text blocks joined by ``"\n"``
into one string ``content`` (tests/data/native/claude_code/tool_result_error.jsonl): that string
must equal the delivered text parts joined the same way (``Expected.joined``); a failed result
never holds images (Claude Code takes images only in successful results).

Codex confirms with ``item/completed`` for a ``dynamicToolCall`` whose ``threadId`` and
``turnId`` are those of the call's ``item/started``, whose ``id`` / ``tool`` are the call id and
function name, whose ``status`` is ``completed`` when the result succeeded else ``failed``, whose
``success`` is the result's flag, and whose ``contentItems`` equal the delivered content's
Codex encoding item for item (text equal, ``imageUrl`` equal). Codex releases a call with the
same record: when the Turn ends (interrupted) with the call unanswered, the real app-server
prints that call's ``item/completed`` with ``status: "failed"``, ``success: false`` and
``contentItems: []`` (there is no ``item/released`` in 0.169): for any result other than a
failure with no content, that record is a release. The Runtime also reports ``item/released``
(marked ``synthesized``) for calls of a harness process that died.

The tracker keeps only a digest of each delivered part (``part_keys``), never the content: text
and image references are still compared exactly (equal 128-bit BLAKE2b digests), and a pending
call stays a few hundred bytes whatever its result carries.

States: ``pending → applied | uncertain | failed``; terminal states never change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses import codex

OBSERVATION_SCHEMA = "runtime.observation/1"
# The spec's receipt window; the service takes Settings.receipt_window_s (at most this).
RECEIPT_WINDOW_S = 10.0


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True, slots=True)
class Confirmed:
    pass


@dataclass(frozen=True, slots=True)
class Released:
    pass


@dataclass(frozen=True, slots=True)
class NotAMatch:
    field: str
    reason: str


Verdict = Confirmed | Released | NotAMatch

CONFIRMED = Confirmed()
RELEASED = Released()


# A delivered part, as the tracker keeps it: its kind and a 128-bit BLAKE2b digest of its text
# (text parts) or image reference (image parts). Exact equality of the text / URL is checked
# through the digest, so a pending call costs a few hundred bytes even when its result carries
# megabytes of images.
PartKind = Literal["text", "image"]
PartKey = tuple[PartKind, bytes]


def digest(value: str) -> bytes:
    return hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def part_keys(content: Sequence[Mapping[str, Any]]) -> tuple[PartKey, ...]:
    """The delivered content list → what matching needs of it. An ``input_image`` part keys on
    its ``image_url``; every other part is a text position keyed on its ``text``."""
    keys: list[PartKey] = []
    for part in content:
        if part.get("type") == "input_image":
            keys.append(("image", digest(str(part.get("image_url")))))
        else:
            keys.append(("text", digest(str(part.get("text")))))
    return tuple(keys)


def joined_key(content: Sequence[Mapping[str, Any]]) -> bytes | None:
    """The digest of the text parts joined by ``"\n"`` — how the real Claude Code prints a
    failed result's content — or ``None`` when the list holds an image."""
    if any(part.get("type") == "input_image" for part in content):
        return None
    return digest("\n".join(str(part.get("text")) for part in content))


@dataclass(frozen=True, slots=True)
class Expected:
    """What a receipt must show. ``content`` holds the delivered content list's part keys
    (build with ``expect`` or ``part_keys``), in the delivered order."""

    harness: str
    session_id: str  # Core's session id (the observation envelope's ``session_id``)
    call_id: str
    name: str
    success: bool
    content: tuple[PartKey, ...]
    native_session_id: str | None = None  # Claude Code: the assistant record's session_id
    thread_id: str | None = None  # Codex: the call's item/started threadId
    turn_id: str | None = None  # Codex: the call's item/started turnId
    joined: bytes | None = None  # Claude Code failed results: ``joined_key`` of the content


def expect(
    *,
    harness: str,
    session_id: str,
    call_id: str,
    name: str,
    success: bool,
    content: Sequence[Mapping[str, Any]],
    native_session_id: str | None = None,
    thread_id: str | None = None,
    turn_id: str | None = None,
) -> Expected:
    """An ``Expected`` from the content list exactly as delivered (``delivery.result_content``)."""
    return Expected(
        harness=harness,
        session_id=session_id,
        call_id=call_id,
        name=name,
        success=success,
        content=part_keys(content),
        native_session_id=native_session_id,
        thread_id=thread_id,
        turn_id=turn_id,
        joined=joined_key(content),
    )


def _differs(field: str, expected: object, got: object) -> NotAMatch:
    return NotAMatch(field, f"{field}: expected {expected!r}, got {got!r}")


def _is_bool(value: object, expected: bool) -> bool:
    return isinstance(value, bool) and value is expected


def match_observation(expected: Expected, observation: Mapping[str, Any]) -> Verdict:
    """Match a whole ``runtime.observation/1`` envelope: the envelope's Core session and
    harness first, then the native record."""
    if observation.get("schema") != OBSERVATION_SCHEMA:
        return _differs("schema", OBSERVATION_SCHEMA, observation.get("schema"))
    if observation.get("session_id") != expected.session_id:
        return _differs("session", expected.session_id, observation.get("session_id"))
    if observation.get("harness") != expected.harness:
        return _differs("harness", expected.harness, observation.get("harness"))
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


def match_native(expected: Expected, native: Mapping[str, Any]) -> Verdict:
    if expected.harness == "claude_code":
        return match_claude(expected, native)
    if expected.harness == "codex":
        return match_codex(expected, native)
    return NotAMatch("harness", f"harness: {expected.harness!r} has no application receipts")


def _released(native: Mapping[str, Any], want: tuple[tuple[str, Any], ...]) -> Verdict:
    """A release names the call: ``RELEASED`` if each field is as expected, else the first that
    differs."""
    for name, value in want:
        if native.get(name) != value:
            return _differs(name, value, native.get(name))
    return RELEASED


# --------------------------------------------------------------------------- Claude Code


def match_claude(expected: Expected, native: Mapping[str, Any]) -> Verdict:
    kind = native.get("type")
    if kind == "tool_release":
        return _released(native, (("session_id", expected.native_session_id),
                                  ("tool_use_id", expected.call_id)))
    if kind != "user":
        return _differs("type", "user", kind)
    dead = claude.dead_flag(native)  # one classifier with the adapter and storage
    if dead == "isReplay":
        return NotAMatch("isReplay", "isReplay: a replayed record never confirms")
    if dead == "isSynthetic":
        return NotAMatch("isSynthetic", "isSynthetic: a synthetic record never confirms")
    if native.get("parent_tool_use_id") is not None:
        return NotAMatch("parent_tool_use_id", "parent_tool_use_id: a Subagent record")
    if expected.native_session_id is None or native.get("session_id") != expected.native_session_id:
        return _differs("session_id", expected.native_session_id, native.get("session_id"))
    message = native.get("message")
    blocks = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(blocks, list):
        return NotAMatch("message.content", "message.content: not a list of blocks")
    results = [
        b
        for b in blocks
        if isinstance(b, Mapping)
        and b.get("type") == "tool_result"
        and b.get("tool_use_id") == expected.call_id
    ]
    if len(results) != 1:
        return NotAMatch(
            "tool_use_id", f"tool_use_id: {len(results)} tool_result blocks for {expected.call_id}"
        )
    block = results[0]
    is_error = block.get("is_error", False)
    if not _is_bool(is_error, not expected.success):
        return _differs("is_error", not expected.success, is_error)
    got = block.get("content")
    if isinstance(got, str) and not expected.success:
        # A failed result as the real binary prints it: the text blocks joined by "\n".
        if expected.joined is None or digest(got) != expected.joined:
            return NotAMatch("content", f"content: the joined text differs, got {got!r:.80}")
        return CONFIRMED
    return _match_claude_blocks(expected.content, got)


def _match_claude_blocks(want: tuple[PartKey, ...], got: object) -> Verdict:
    if not isinstance(got, list):
        return NotAMatch("content", "content: not a list of blocks")
    if len(got) != len(want):
        return _differs("content.count", len(want), len(got))
    for i, ((kind, key), block) in enumerate(zip(want, got, strict=True)):
        btype = block.get("type") if isinstance(block, Mapping) else None
        if kind == "image":
            if btype != "image":
                return _differs(f"content[{i}].type", "image", btype)
        else:
            if btype != "text":
                return _differs(f"content[{i}].type", "text", btype)
            assert isinstance(block, Mapping)
            text = block.get("text")
            if not isinstance(text, str) or digest(text) != key:
                return NotAMatch(
                    f"content[{i}].text", f"content[{i}].text: differs, got {text!r:.80}"
                )
    return CONFIRMED


# --------------------------------------------------------------------------- Codex


def match_codex(expected: Expected, native: Mapping[str, Any]) -> Verdict:
    method = native.get("method")
    params = native.get("params")
    if not isinstance(params, Mapping):
        return NotAMatch("params", "params: not an object")
    if method == "item/released":
        return _released(params, (("threadId", expected.thread_id),
                                  ("turnId", expected.turn_id), ("callId", expected.call_id)))
    if method != "item/completed":
        return _differs("method", "item/completed", method)
    item = params.get("item")
    if not isinstance(item, Mapping):
        return NotAMatch("item", "item: not an object")
    if item.get("type") != "dynamicToolCall":
        return _differs("item.type", "dynamicToolCall", item.get("type"))
    if expected.thread_id is None or params.get("threadId") != expected.thread_id:
        return _differs("threadId", expected.thread_id, params.get("threadId"))
    if expected.turn_id is None or params.get("turnId") != expected.turn_id:
        return _differs("turnId", expected.turn_id, params.get("turnId"))
    if item.get("id") != expected.call_id:
        return _differs("item.id", expected.call_id, item.get("id"))
    if item.get("tool") != expected.name:
        return _differs("item.tool", expected.name, item.get("tool"))
    got = item.get("contentItems")
    if (item.get("status") == "failed" and item.get("success") is False and got == []
            and not (expected.success is False and not expected.content)):
        # What the real app-server prints when the Turn ends (interrupt) with the call
        # unanswered: the call's item/completed, failed, with no content. Not this result.
        return RELEASED
    status = codex.expected_status(expected.success)
    if item.get("status") != status:
        return _differs("item.status", status, item.get("status"))
    if not _is_bool(item.get("success"), expected.success):
        return _differs("item.success", expected.success, item.get("success"))
    if not isinstance(got, list):
        return NotAMatch("contentItems", "contentItems: not a list")
    if len(got) != len(expected.content):
        return _differs("contentItems.count", len(expected.content), len(got))
    for i, ((kind, key), g) in enumerate(zip(expected.content, got, strict=True)):
        wtype, field = ("inputImage", "imageUrl") if kind == "image" else ("inputText", "text")
        gtype = g.get("type") if isinstance(g, Mapping) else None
        if gtype != wtype:
            return _differs(f"contentItems[{i}].type", wtype, gtype)
        assert isinstance(g, Mapping)
        value = g.get(field)
        if not isinstance(value, str) or digest(value) != key:
            return NotAMatch(
                f"contentItems[{i}].{field}",
                f"contentItems[{i}].{field}: differs, got {value!r:.80}",
            )
    return CONFIRMED


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

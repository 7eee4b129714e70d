"""Claude Code: native encoding, per-Turn bookkeeping (bridge protocol 3) and observation
classification.

* Each public message becomes one native user message (``stream-json`` input) with a fresh
  UUID; ``input_text`` → ``{"type": "text", "text"}``, ``input_image`` (an inline data URI) →
  ``{"type": "image", "source": {"type": "base64", "media_type", "data"}}``, in order. A message
  with no image and no non-whitespace text is refused (terminal ``UnsupportedContent``), with the
  whitespace set admission uses (``shared.domain.whitespace``).
* ``ClaudeTurn`` enforces the bridge's bound: at most ``MAX_USER_MESSAGES_PER_TURN`` (64) native
  user messages per native Turn, the opening prompt included. A batch that would pass it is
  rejected before any part of it is submitted (nothing of it is recorded) and the running Turn
  ends. A public input counts as applied only after every native message of its batch is
  consumed.
* A function result becomes one ``tool_result`` block (``is_error = not success``) whose
  content blocks follow the delivered content list in order.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from shared.domain.errors import join_path
from shared.domain.harnesses import facts
from shared.domain.harnesses.errors import (
    AdapterError,
    TurnBoundExceeded,
    TurnEnded,
    UnsupportedContent,
)
from shared.domain.receipt_types import (
    CONFIRMED,
    Expected,
    NotAMatch,
    PartKey,
    Verdict,
    differs,
    digest,
    is_bool,
    released,
)
from shared.domain.whitespace import has_non_whitespace

HARNESS = "claude_code"
# The one definition of both; the profile table (``shared.domain.harness``), the bridges and the
# Runtime's registration read them from here.
MAX_USER_MESSAGES_PER_TURN = 64  # user messages per native Turn, opening prompt included
# Claude Code 2.1.328 hands a failed tool result to its history and to the model as one string:
# the text parts joined by "\n", then trimmed (leading and trailing whitespace dropped; inside,
# everything kept). Such a result's receipt never matches the exact text, so it stays uncertain
# (docs/harnesses.md); the conformance kit checks that it is not confirmed.
TRIMS_FAILED_RESULT_TEXT = True
BRIDGE_PROTOCOL = 3  # the bridge protocol Core's daemon requires (exactly this one)

NativeBlock = dict[str, Any]
NativeMessage = dict[str, Any]

_IMAGE_TYPES = ("image/png", "image/jpeg")


def new_uuid() -> str:
    return str(_uuid.uuid4())


def _image_block(image_url: object, param: str) -> NativeBlock | AdapterError:
    if isinstance(image_url, str) and image_url.startswith("data:"):
        header, sep, data = image_url[len("data:") :].partition(",")
        media_type, _, encoding = header.partition(";")
        if sep and encoding == "base64" and media_type in _IMAGE_TYPES:
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": media_type, "data": data},
            }
    return UnsupportedContent(
        message="Claude Code takes images only as inline PNG or JPEG base64 data URIs",
        param=param,
    )


def content_blocks(
    content: Iterable[Mapping[str, Any]], param: str = "content"
) -> list[NativeBlock] | AdapterError:
    blocks: list[NativeBlock] = []
    for j, part in enumerate(content):
        kind = part.get("type")
        where = join_path(param, j)
        if kind == "input_text":
            blocks.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            block = _image_block(part.get("image_url"), where)
            if isinstance(block, AdapterError):
                return block
            blocks.append(block)
        else:
            return UnsupportedContent(message=f"unknown content part type {kind!r}", param=where)
    return blocks


def user_message(
    blocks: list[NativeBlock], *, native_session_id: str | None, uuid: str
) -> NativeMessage:
    return {
        "type": "user",
        "message": {"role": "user", "content": blocks},
        "parent_tool_use_id": None,
        "session_id": native_session_id,
        "uuid": uuid,
    }


def runnable(blocks: Sequence[NativeBlock]) -> bool:
    """A native user message Claude Code can run: an image, or text with a character outside
    the whitespace set that admission uses (``shared.domain.whitespace``, one set)."""
    return any(
        b["type"] == "image" or (b["type"] == "text" and has_non_whitespace(b["text"]))
        for b in blocks
    )


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    *,
    native_session_id: str | None = None,
    uuid_factory: Callable[[], str] = new_uuid,
) -> list[NativeMessage] | AdapterError:
    """One native user message per public message, each with a fresh UUID. All or nothing: an
    error in any message returns the error and no message."""
    encoded: list[list[NativeBlock]] = []
    for i, message in enumerate(messages):
        param = join_path(join_path("messages", i), "content")
        blocks = content_blocks(message["content"], param)
        if isinstance(blocks, AdapterError):
            return blocks
        if not runnable(blocks):
            return UnsupportedContent(
                message=(
                    "Claude Code cannot run a message with no image and no non-whitespace text "
                    "(whitespace: Go unicode.IsSpace ∪ ECMAScript trim, the admission set)"
                ),
                param=param,
            )
        encoded.append(blocks)
    return [
        user_message(b, native_session_id=native_session_id, uuid=uuid_factory()) for b in encoded
    ]


def tool_result_block(
    call_id: str, success: bool, content: Sequence[Mapping[str, Any]]
) -> NativeBlock | AdapterError:
    """A delivered function-result content list → one native ``tool_result`` block. Images are
    allowed only in successful results (admission already refuses the rest)."""
    if not success and any(p.get("type") == "input_image" for p in content):
        return UnsupportedContent(
            message="Claude Code takes images only in successful function results",
            param="content",
        )
    blocks = content_blocks(content)
    if isinstance(blocks, AdapterError):
        return blocks
    return {
        "type": "tool_result",
        "tool_use_id": call_id,
        "is_error": not success,
        "content": blocks,
    }


def tool_result_message(
    call_id: str,
    success: bool,
    content: Sequence[Mapping[str, Any]],
    *,
    native_session_id: str | None = None,
    uuid: str | None = None,
) -> NativeMessage | AdapterError:
    block = tool_result_block(call_id, success, content)
    if isinstance(block, AdapterError):
        return block
    return user_message([block], native_session_id=native_session_id, uuid=uuid or new_uuid())


# The real binary names Core's public functions by their MCP tool name ``mcp__core__<name>`` (the
# Runtime's MCP bridge is the server ``core``); its own tools (``Agent``/``Task`` for subagents,
# ``Bash``, ``Read``…: the ``tools`` list of its ``system``/``init`` record) are not public
# functions. The reference Runtime's simulation uses the bare public name.
MCP_PREFIX = "mcp__core__"
BUILTIN_TOOLS = frozenset({
    "Agent", "Task", "Bash", "BashOutput", "CronCreate", "CronDelete", "CronList", "Edit",
    "EnterWorktree", "ExitPlanMode", "ExitWorktree", "Glob", "Grep", "KillShell", "ListAgents",
    "ListMcpResourcesTool", "Monitor", "MultiEdit", "NotebookEdit", "Read",
    "ReadMcpResourceTool", "ReportFindings", "ScheduleWakeup", "SendMessage", "Skill",
    "TaskStop", "TodoWrite", "ToolSearch", "WebFetch", "WebSearch", "Workflow", "Write",
})


def public_name(tool_name: str) -> str | None:
    """The public function a native ``tool_use`` name stands for, or ``None`` when it is not a
    public function (a built-in tool, another MCP server's tool)."""
    if tool_name.startswith(MCP_PREFIX):
        return tool_name[len(MCP_PREFIX):] or None
    if tool_name.startswith("mcp__") or tool_name in BUILTIN_TOOLS:
        return None
    return tool_name


@dataclass(frozen=True, slots=True)
class ClaudeCall:
    native_session_id: str
    call_id: str
    name: str
    input: Any


LIVENESS_FLAGS = ("isReplay", "isSynthetic")


def flag_is_live(native: Mapping[str, Any], key: str) -> bool:
    """A liveness flag (``isReplay`` / ``isSynthetic``) leaves a record live only when it is
    absent or exactly JSON ``false``. Checked by identity: ``0 == False`` and
    ``0 in (None, False)`` hold in Python, but ``0``, ``0.0``, ``""`` and ``null`` are not
    ``false`` (docs/runtime-boundary.md)."""
    return key not in native or native[key] is False


def dead_flag(native: Mapping[str, Any]) -> str | None:
    """The first liveness flag that makes ``native`` a replayed or synthetic record, or None."""
    for key in LIVENESS_FLAGS:
        if not flag_is_live(native, key):
            return key
    return None


def is_live_root(native: Mapping[str, Any]) -> bool:
    """The one classifier of Claude Code records for the adapter, storage and receipts: live
    (``isReplay`` and ``isSynthetic`` absent or exactly ``false``) and root
    (``parent_tool_use_id`` absent or ``null``). Replayed, synthetic and Subagent records
    neither open a public call nor confirm a result."""
    return dead_flag(native) is None and native.get("parent_tool_use_id") is None


def tool_uses(native: Mapping[str, Any]) -> list[ClaudeCall]:
    """The root function calls in a live ``assistant`` record (Subagent, replayed and
    synthetic records announce no public call)."""
    if native.get("type") != "assistant" or not is_live_root(native):
        return []
    session_id = native.get("session_id")
    message = native.get("message")
    if not isinstance(session_id, str) or not isinstance(message, Mapping):
        return []
    blocks = message.get("content")
    if not isinstance(blocks, list):
        return []
    calls = []
    for block in blocks:
        if (
            isinstance(block, Mapping)
            and block.get("type") == "tool_use"
            and isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
        ):
            name = public_name(block["name"])
            if name is not None:
                calls.append(ClaudeCall(session_id, block["id"], name, block.get("input")))
    return calls


def classify_all(native: Mapping[str, Any]) -> list[facts.Fact]:
    """Every fact a Claude Code record carries: each root call of a live ``assistant`` record
    (replayed, synthetic and Subagent copies of a ``tool_use`` open nothing), or the end of a
    native Turn (a ``result`` record)."""
    if native.get("type") == "assistant":
        return [
            facts.CallOpened(call_id=c.call_id, name=c.name, arguments=c.input,
                             native_ids={"session_id": c.native_session_id})
            for c in tool_uses(native)
        ]
    return result_end(native)


def result_end(native: Mapping[str, Any]) -> list[facts.Fact]:
    """A ``result`` record ends the native Turn: completed on ``subtype: success``."""
    if native.get("type") == "result":
        sub = native.get("subtype")
        return [facts.TurnEnded("completed" if sub == "success" else "failed", None)]
    return []


class ClaudeTurn:
    """Bookkeeping for one native Claude Code Turn: the user-message bound and per-batch
    consumption. Methods return the native messages to submit, or an error value; the
    ``submitted`` list records every native message this Turn ever handed out."""

    __slots__ = (
        "_applied",
        "_batch_of",
        "_remaining",
        "_uuid_factory",
        "ended",
        "max_user_messages",
        "native_session_id",
        "submitted",
        "user_messages",
    )

    def __init__(
        self,
        *,
        max_user_messages: int = MAX_USER_MESSAGES_PER_TURN,
        native_session_id: str | None = None,
        uuid_factory: Callable[[], str] = new_uuid,
    ) -> None:
        self.max_user_messages = max_user_messages
        self.native_session_id = native_session_id
        self._uuid_factory = uuid_factory
        self.user_messages = 0
        self.ended: AdapterError | None = None
        self.submitted: list[NativeMessage] = []
        self._batch_of: dict[str, str] = {}  # native uuid → batch id, until consumed
        self._remaining: dict[str, int] = {}  # batch id → native messages not yet consumed
        self._applied: set[str] = set()

    @property
    def running(self) -> bool:
        return self.ended is None

    def open(
        self, batch_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[NativeMessage] | AdapterError:
        """The opening prompt (counts toward the bound)."""
        if self.user_messages or self.submitted:
            return TurnEnded(message="the native Turn is already open", param=None)
        return self._add(batch_id, messages, steering=False)

    def steer(
        self, batch_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[NativeMessage] | AdapterError:
        """A steering batch joining the running Turn."""
        return self._add(batch_id, messages, steering=True)

    def _add(
        self, batch_id: str, messages: Sequence[Mapping[str, Any]], *, steering: bool
    ) -> list[NativeMessage] | AdapterError:
        if self.ended is not None:
            return TurnEnded(message=f"the native Turn has ended: {self.ended.message}")
        if not messages:
            return AdapterError(
                code="invalid_batch", message="a batch needs at least one message", param="messages"
            )
        if batch_id in self._remaining or batch_id in self._applied:
            return AdapterError(
                code="invalid_batch", message=f"batch {batch_id} was already submitted"
            )
        after = self.user_messages + len(messages)
        if after > self.max_user_messages:
            error = TurnBoundExceeded(
                message=(
                    f"the batch of {len(messages)} would bring the native Turn to {after} user "
                    f"messages; the bound is {self.max_user_messages} including the opening prompt"
                ),
                param="messages",
            )
            # Checked before anything is encoded or recorded; the running Turn ends.
            self.ended = error
            return error
        encoded = encode_messages(
            messages, native_session_id=self.native_session_id, uuid_factory=self._uuid_factory
        )
        if isinstance(encoded, AdapterError):
            return encoded  # nothing recorded; the Turn continues
        self.user_messages = after
        for native in encoded:
            self._batch_of[native["uuid"]] = batch_id
        self._remaining[batch_id] = len(encoded)
        self.submitted.extend(encoded)
        return encoded

    def consumed(self, native_uuid: str) -> str | None:
        """The harness consumed the native message ``native_uuid``. Returns the batch id when
        this was the last unconsumed message of its batch (the public input is now applied),
        else ``None``. Unknown or repeated UUIDs change nothing."""
        batch_id = self._batch_of.pop(native_uuid, None)
        if batch_id is None:
            return None
        self._remaining[batch_id] -= 1
        if self._remaining[batch_id] == 0:
            del self._remaining[batch_id]
            self._applied.add(batch_id)
            return batch_id
        return None

    def is_applied(self, batch_id: str) -> bool:
        return batch_id in self._applied

    def finish(self, reason: str) -> None:
        """The native Turn ended (a ``result`` record); later input needs a new Turn."""
        if self.ended is None:
            self.ended = TurnEnded(message=reason)


# --------------------------------------------------------------------------- receipts


def receipt_call_ids(native: Mapping[str, Any]) -> tuple[str, ...]:
    """The calls a record could decide (confirm or release): the ``tool_result`` blocks of a
    live root ``user`` record (``is_live_root``), or a ``tool_release``. Replayed echoes of our
    own input, synthetic and Subagent records, and every other type decide none."""
    kind = native.get("type")
    if kind == "tool_release":
        cid = native.get("tool_use_id")
        return (cid,) if isinstance(cid, str) else ()
    if kind != "user" or not is_live_root(native):
        return ()
    message = native.get("message")
    blocks = message.get("content") if isinstance(message, Mapping) else None
    if not isinstance(blocks, list):
        return ()
    return tuple(b["tool_use_id"] for b in blocks
                 if isinstance(b, Mapping) and b.get("type") == "tool_result"
                 and isinstance(b.get("tool_use_id"), str))


def match_receipt(expected: Expected, native: Mapping[str, Any]) -> Verdict:
    """The receipt matcher (``shared.domain.receipts.match_native`` dispatches here).

    Claude Code confirms with a ``type: "user"`` record that is live (``isReplay``
    false/absent), not synthetic (``isSynthetic`` false/absent), root (``parent_tool_use_id``
    null/absent), of the native session recorded when the call was announced, holding exactly
    one ``tool_result`` block for the call whose ``is_error`` is ``not success`` (absent =
    false, as in the Messages API) and whose content blocks match the delivered content list in
    count and order: a ``text`` block with exactly the same text at every text position, an
    ``image`` block at every image position (the harness may re-encode images, so the image
    bytes are not compared). The real Claude Code 2.1.328 prints a *failed* result (``is_error:
    true``) with its text blocks joined by ``"\n"`` into one string ``content``
    (tests/data/native/claude_code/tool_result_error.jsonl): that string must equal the
    delivered text parts joined the same way (``Expected.joined``); a failed result never holds
    images (Claude Code takes images only in successful results).
    """
    kind = native.get("type")
    if kind == "tool_release":
        return released(native, (("session_id", expected.native_session_id),
                                 ("tool_use_id", expected.call_id)))
    if kind != "user":
        return differs("type", "user", kind)
    dead = dead_flag(native)  # one classifier with the adapter and storage
    if dead == "isReplay":
        return NotAMatch("isReplay", "isReplay: a replayed record never confirms")
    if dead == "isSynthetic":
        return NotAMatch("isSynthetic", "isSynthetic: a synthetic record never confirms")
    if native.get("parent_tool_use_id") is not None:
        return NotAMatch("parent_tool_use_id", "parent_tool_use_id: a Subagent record")
    if expected.native_session_id is None or native.get("session_id") != expected.native_session_id:
        return differs("session_id", expected.native_session_id, native.get("session_id"))
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
    if not is_bool(is_error, not expected.success):
        return differs("is_error", not expected.success, is_error)
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
        return differs("content.count", len(want), len(got))
    for i, ((kind, key), block) in enumerate(zip(want, got, strict=True)):
        btype = block.get("type") if isinstance(block, Mapping) else None
        if kind == "image":
            if btype != "image":
                return differs(f"content[{i}].type", "image", btype)
        else:
            if btype != "text":
                return differs(f"content[{i}].type", "text", btype)
            assert isinstance(block, Mapping)
            text = block.get("text")
            if not isinstance(text, str) or digest(text) != key:
                return NotAMatch(
                    f"content[{i}].text", f"content[{i}].text: differs, got {text!r:.80}"
                )
    return CONFIRMED

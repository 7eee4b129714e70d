"""What receipt matching shares across harnesses: the verdicts, what a receipt must show
(``Expected``) and the digests of the delivered parts. Each harness's matcher sits in its harness
module (``shared.domain.harnesses.codex.match_receipt``, ``...claude_code.match_receipt``);
``shared.domain.receipts`` dispatches to them and holds the per-call state machine.

Matching returns a verdict value:
* ``Confirmed`` — the observation is the harness's record that it applied exactly this result;
* ``Released`` — the harness released this call without applying it;
* ``NotAMatch(field, reason)`` — anything else; ``field`` names the first rule that failed.

The tracker keeps only a digest of each delivered part (``part_keys``), never the content: text
and image references are still compared exactly (equal 128-bit BLAKE2b digests), and a pending
call stays a few hundred bytes whatever its result carries.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

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


def differs(field: str, expected: object, got: object) -> NotAMatch:
    return NotAMatch(field, f"{field}: expected {expected!r}, got {got!r}")


def is_bool(value: object, expected: bool) -> bool:
    return isinstance(value, bool) and value is expected


def released(native: Mapping[str, Any], want: tuple[tuple[str, Any], ...]) -> Verdict:
    """A release names the call: ``RELEASED`` if each field is as expected, else the first that
    differs."""
    for name, value in want:
        if native.get(name) != value:
            return differs(name, value, native.get(name))
    return RELEASED

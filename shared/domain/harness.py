"""Harness profiles as data: one frozen table per harness, read side by side with the primary
spec's three tables (message images, whitespace-only messages, function results).

Admission reads ``message_images``, ``whitespace_only``, ``function_results``, ``placements``
and ``max_user_messages_per_batch``; the dispatcher reads ``bridge_protocols`` and
``max_user_messages_per_turn``. Nothing here does I/O.

Spec table → field:

=============  ===========================================  ==========================
Harness        Message images                               ``message_images``
=============  ===========================================  ==========================
Codex          accepted on none, openai_hosted, self_hosted  all three True
Claude Code    accepted on none, openai_hosted, self_hosted  all three True
MiniMax Code   rejected                                      all three False
=============  ===========================================  ==========================

=============  ===========================================  ==========================
Harness        No image and no non-whitespace text          ``whitespace_only``
=============  ===========================================  ==========================
Codex          admitted and delivered unchanged             "admit"
Claude Code    400 unsupported_or_invalid_configuration     "reject"
MiniMax Code   400 unsupported_or_invalid_configuration     "reject"
=============  ===========================================  ==========================

Function results (``function_results``): Codex — text and ordered text/image output, each part
checked for form, images passed unchanged, in successful and failed results alike; Claude Code —
text output, images only in successful results and only inline PNG/JPEG; MiniMax Code — no
public functions.

Decisions (docs/admission.md):
* Every harness supports every placement (``none``, ``openai_hosted``, ``self_hosted``). The spec
  names all three for Codex and Claude Code and says nothing that restricts MiniMax Code. The
  field is data so that a harness that loses a placement is a one-line change; admission answers
  400 ``unsupported_or_invalid_configuration`` (param ``placement``) for a placement a harness
  does not support.
* ``text_only`` is True for MiniMax Code only: it takes no image anywhere (messages or results).
* Claude Code: the bridge accepts at most 64 user messages per native Turn, opening prompt
  included, and Core's daemon requires bridge protocol 3. A single input batch of more than 64
  messages can therefore never be delivered to it, so admission rejects it (400
  ``unsupported_or_invalid_configuration``); whether a smaller batch fits the running Turn is the
  dispatcher's question.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Placement = Literal["none", "openai_hosted", "self_hosted"]
PLACEMENTS: tuple[Placement, ...] = ("none", "openai_hosted", "self_hosted")
HarnessName = Literal["codex", "claude_code", "minimax_code"]
HARNESSES: tuple[HarnessName, ...] = ("codex", "claude_code", "minimax_code")

ImageFormat = Literal["png", "jpeg"]


@dataclass(frozen=True, slots=True)
class FunctionResults:
    """The "Function results" table row of one harness."""

    public_functions: bool  # False: every tool_result event → 400 unsupported…
    text_output: bool  # string output and input_text parts
    images_in_success: bool  # input_image parts when ``success`` is true
    images_in_failure: bool  # input_image parts when ``success`` is false
    image_formats: frozenset[ImageFormat]  # inline formats the harness takes in a result


@dataclass(frozen=True, slots=True)
class HarnessProfile:
    name: HarnessName
    title: str
    placements: frozenset[Placement]
    message_images: Mapping[Placement, bool]  # per placement
    whitespace_only: Literal["admit", "reject"]
    function_results: FunctionResults
    text_only: bool
    # bridge protocols Core's adapter speaks (None: the harness has no bridge protocol)
    bridge_protocols: frozenset[int] | None
    # user messages one native Turn accepts, opening prompt included (None: unbounded)
    max_user_messages_per_turn: int | None

    def images_allowed(self, placement: str) -> bool:
        return any(p == placement and ok for p, ok in self.message_images.items())

    @property
    def max_user_messages_per_batch(self) -> int | None:
        """One input batch must fit in one native Turn."""
        return self.max_user_messages_per_turn


def _per_placement(none: bool, openai_hosted: bool, self_hosted: bool) -> Mapping[Placement, bool]:
    return MappingProxyType(
        {"none": none, "openai_hosted": openai_hosted, "self_hosted": self_hosted}
    )


_ALL_PLACEMENTS: frozenset[Placement] = frozenset(PLACEMENTS)
_INLINE_PNG_JPEG: frozenset[ImageFormat] = frozenset({"png", "jpeg"})

CODEX = HarnessProfile(
    name="codex",
    title="Codex",
    placements=_ALL_PLACEMENTS,
    message_images=_per_placement(none=True, openai_hosted=True, self_hosted=True),
    whitespace_only="admit",
    function_results=FunctionResults(
        public_functions=True,
        text_output=True,
        images_in_success=True,
        images_in_failure=True,
        image_formats=_INLINE_PNG_JPEG,
    ),
    text_only=False,
    bridge_protocols=None,
    max_user_messages_per_turn=None,
)

CLAUDE_CODE = HarnessProfile(
    name="claude_code",
    title="Claude Code",
    placements=_ALL_PLACEMENTS,
    message_images=_per_placement(none=True, openai_hosted=True, self_hosted=True),
    whitespace_only="reject",
    function_results=FunctionResults(
        public_functions=True,
        text_output=True,
        images_in_success=True,
        images_in_failure=False,
        image_formats=_INLINE_PNG_JPEG,
    ),
    text_only=False,
    bridge_protocols=frozenset({3}),
    max_user_messages_per_turn=64,
)

MINIMAX_CODE = HarnessProfile(
    name="minimax_code",
    title="MiniMax Code",
    placements=_ALL_PLACEMENTS,
    message_images=_per_placement(none=False, openai_hosted=False, self_hosted=False),
    whitespace_only="reject",
    function_results=FunctionResults(
        public_functions=False,
        text_output=False,
        images_in_success=False,
        images_in_failure=False,
        image_formats=frozenset(),
    ),
    text_only=True,
    bridge_protocols=None,
    max_user_messages_per_turn=None,
)

PROFILES: Mapping[str, HarnessProfile] = MappingProxyType(
    {p.name: p for p in (CODEX, CLAUDE_CODE, MINIMAX_CODE)}
)

"""Harness profiles as data: one frozen table per harness, read side by side with the primary
spec's three tables (message images, whitespace-only messages, function results).

Admission reads ``message_images``, ``whitespace_only``, ``function_results``, ``placements``
and ``max_user_messages_per_batch``; the binding choice
(``services.dispatcher.domain.binding``) reads ``bridge_protocols``, and the Claude Code harness
module (``shared.domain.harnesses.claude_code``) both.
Nothing here does I/O.

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
from typing import Literal, cast

from shared.domain.harnesses import claude_code

# the names, enumerated once in shared.messages.schemas
from shared.messages.schemas import HARNESSES as HARNESSES
from shared.messages.schemas import PLACEMENTS as PLACEMENTS
from shared.messages.schemas import HarnessName as HarnessName
from shared.messages.schemas import Placement as Placement

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
        return self.message_images.get(cast(Placement, placement), False)

    @property
    def max_user_messages_per_batch(self) -> int | None:
        """One input batch must fit in one native Turn."""
        return self.max_user_messages_per_turn


_ALL_PLACEMENTS: frozenset[Placement] = frozenset(PLACEMENTS)
_INLINE_PNG_JPEG: frozenset[ImageFormat] = frozenset({"png", "jpeg"})

# The spec's tables, one row per harness (see the module docstring).

_TITLES: Mapping[HarnessName, str] = {
    "codex": "Codex", "claude_code": "Claude Code", "minimax_code": "MiniMax Code",
}

# "Message images", accepted on   none   openai_hosted  self_hosted
_MESSAGE_IMAGES: Mapping[HarnessName, tuple[bool, bool, bool]] = {
    "codex":                     (True,  True,          True),
    "claude_code":               (True,  True,          True),
    "minimax_code":              (False, False,         False),
}

# "No image and no non-whitespace text"
_WHITESPACE_ONLY: Mapping[HarnessName, Literal["admit", "reject"]] = {
    "codex": "admit", "claude_code": "reject", "minimax_code": "reject",
}

# "Function results"    public     text    images in  images in  inline
#                       functions  output  success    failure    formats
_FUNCTION_RESULTS: Mapping[HarnessName, FunctionResults] = {
    "codex":        FunctionResults(True,  True,  True,  True,  _INLINE_PNG_JPEG),
    "claude_code":  FunctionResults(True,  True,  True,  False, _INLINE_PNG_JPEG),
    "minimax_code": FunctionResults(False, False, False, False, frozenset()),
}

# Core's own facts (module docstring, "Decisions"); Claude Code's two are defined once, in its
# module (``shared.domain.harnesses.claude_code``): protocol 3 and the 64 bound.
_CLAUDE_BRIDGE = frozenset({claude_code.BRIDGE_PROTOCOL})
_CLAUDE_BOUND = claude_code.MAX_USER_MESSAGES_PER_TURN
#                 text only  bridge protocols  user messages per native Turn
_ADAPTER: Mapping[HarnessName, tuple[bool, frozenset[int] | None, int | None]] = {
    "codex":        (False,     None,             None),
    "claude_code":  (False,     _CLAUDE_BRIDGE,   _CLAUDE_BOUND),
    "minimax_code": (True,      None,             None),
}


def _profile(name: HarnessName) -> HarnessProfile:
    text_only, bridge_protocols, max_user_messages_per_turn = _ADAPTER[name]
    return HarnessProfile(
        name=name,
        title=_TITLES[name],
        placements=_ALL_PLACEMENTS,
        message_images=MappingProxyType(dict(zip(PLACEMENTS, _MESSAGE_IMAGES[name], strict=True))),
        whitespace_only=_WHITESPACE_ONLY[name],
        function_results=_FUNCTION_RESULTS[name],
        text_only=text_only,
        bridge_protocols=bridge_protocols,
        max_user_messages_per_turn=max_user_messages_per_turn,
    )


CODEX, CLAUDE_CODE, MINIMAX_CODE = (_profile(name) for name in HARNESSES)

PROFILES: Mapping[str, HarnessProfile] = MappingProxyType(
    {p.name: p for p in (CODEX, CLAUDE_CODE, MINIMAX_CODE)}
)

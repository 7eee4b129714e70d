"""The harness registry: which harness → which module. Each harness's pure knowledge sits in one
module here — ``codex``, ``claude_code``, ``minimax_code``: its constants, native encoding
(docs/runtime-boundary.md) and observation classification (``classify_all``); its profile row is
``shared.domain.harness.PROFILES[harness]`` (the spec's tables read best side by side).

``adapter_for(harness)`` gives a uniform view — ``encode_messages(messages)`` and
``encode_function_result(call_id, success, content)`` — returning native values or a terminal
``AdapterError``; the per-harness modules expose the richer pieces (Claude Code's
``ClaudeTurn``, Codex's ``content_items``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses import codex
from shared.domain.harnesses import minimax_code as text_only
from shared.domain.harnesses.errors import (
    AdapterError,
    TurnBoundExceeded,
    TurnEnded,
    UnsupportedContent,
    is_terminal,
)
from shared.domain.harnesses.facts import Fact

__all__ = [
    "Adapter",
    "AdapterError",
    "TurnBoundExceeded",
    "TurnEnded",
    "UnsupportedContent",
    "adapter_for",
    "is_terminal",
    "module_for",
]


class Adapter(Protocol):
    @property
    def harness(self) -> str: ...

    @property
    def text_only(self) -> bool: ...

    def encode_messages(self, messages: Sequence[Mapping[str, Any]]) -> Any | AdapterError: ...

    def encode_function_result(
        self, call_id: str, success: bool, content: Sequence[Mapping[str, Any]]
    ) -> Any | AdapterError: ...


EncodeMessages = Callable[[Sequence[Mapping[str, Any]]], Any]
EncodeResult = Callable[[str, bool, Sequence[Mapping[str, Any]]], Any]


@dataclass(frozen=True)
class _Adapter:
    """One harness's row: the ``Adapter`` view over its module's encoders."""

    harness: str
    text_only: bool
    messages: EncodeMessages
    function_result: EncodeResult

    def encode_messages(self, messages: Sequence[Mapping[str, Any]]) -> Any | AdapterError:
        return self.messages(messages)

    def encode_function_result(
        self, call_id: str, success: bool, content: Sequence[Mapping[str, Any]]
    ) -> Any | AdapterError:
        return self.function_result(call_id, success, content)


def _codex_function_result(call_id: str, success: bool,
                           content: Sequence[Mapping[str, Any]]) -> Any | AdapterError:
    # the JSON-RPC response answers its request (``item/tool/call``): no call id in it
    return codex.function_result_response(success, content)


_ADAPTERS: dict[str, Adapter] = {a.harness: a for a in (
    _Adapter(codex.HARNESS, False, codex.flatten_messages, _codex_function_result),
    _Adapter(claude.HARNESS, False, claude.encode_messages, claude.tool_result_message),
    _Adapter(text_only.HARNESS, True, text_only.encode_messages,
             text_only.encode_function_result),
)}


def adapter_for(harness: str) -> Adapter:
    """The adapter for ``harness``; ``KeyError`` for an unknown harness."""
    return _ADAPTERS[harness]


class HarnessModule(Protocol):
    """What the cross-harness code asks of a harness module."""

    HARNESS: str

    def classify_all(self, native: Mapping[str, Any]) -> list[Fact]: ...


_MODULES: dict[str, HarnessModule] = {
    codex.HARNESS: codex,
    claude.HARNESS: claude,
    text_only.HARNESS: text_only,
}


def module_for(harness: str) -> HarnessModule | None:
    """The module holding ``harness``'s knowledge, or ``None`` for an unknown harness."""
    return _MODULES.get(harness)

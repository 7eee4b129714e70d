"""Harness adapters: each owns the native encoding its harness needs (docs/runtime-boundary.md).

``adapter_for(harness)`` gives a uniform view — ``encode_messages(messages)`` and
``encode_function_result(call_id, success, content)`` — returning native values or a terminal
``AdapterError``; the per-harness modules expose the richer pieces (Claude Code's
``ClaudeTurn``, Codex's ``content_items``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from shared.domain.adapters import claude, codex, text_only
from shared.domain.adapters.errors import (
    AdapterError,
    TurnBoundExceeded,
    TurnEnded,
    UnsupportedContent,
    is_terminal,
)

__all__ = [
    "Adapter",
    "AdapterError",
    "TurnBoundExceeded",
    "TurnEnded",
    "UnsupportedContent",
    "adapter_for",
    "is_terminal",
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


@dataclass(frozen=True)
class _Codex:
    harness: str = codex.HARNESS
    text_only: bool = False

    def encode_messages(self, messages: Sequence[Mapping[str, Any]]) -> Any | AdapterError:
        return codex.flatten_messages(messages)

    def encode_function_result(
        self, call_id: str, success: bool, content: Sequence[Mapping[str, Any]]
    ) -> Any | AdapterError:
        return codex.function_result_response(success, content)


@dataclass(frozen=True)
class _Claude:
    harness: str = claude.HARNESS
    text_only: bool = False

    def encode_messages(self, messages: Sequence[Mapping[str, Any]]) -> Any | AdapterError:
        return claude.encode_messages(messages)

    def encode_function_result(
        self, call_id: str, success: bool, content: Sequence[Mapping[str, Any]]
    ) -> Any | AdapterError:
        return claude.tool_result_message(call_id, success, content)


@dataclass(frozen=True)
class _TextOnly:
    harness: str = text_only.HARNESS
    text_only: bool = True

    def encode_messages(self, messages: Sequence[Mapping[str, Any]]) -> Any | AdapterError:
        return text_only.encode_messages(messages)

    def encode_function_result(
        self, call_id: str, success: bool, content: Sequence[Mapping[str, Any]]
    ) -> Any | AdapterError:
        return text_only.encode_function_result(call_id, success, content)


_ADAPTERS: dict[str, Adapter] = {
    codex.HARNESS: _Codex(),
    claude.HARNESS: _Claude(),
    text_only.HARNESS: _TextOnly(),
}


def adapter_for(harness: str) -> Adapter:
    """The adapter for ``harness``; ``KeyError`` for an unknown harness."""
    return _ADAPTERS[harness]

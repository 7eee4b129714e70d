"""Adapter errors are values. A terminal one is never retried: retrying cannot add a
wire-format capability (seed 003, "That error is terminal")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class AdapterError:
    code: str
    message: str
    param: str | None = None
    terminal: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class UnsupportedContent(AdapterError):
    """Content the harness has no native mapping for (an image for a text-only harness)."""

    code: str = "unsupported_content"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnBoundExceeded(AdapterError):
    """A Claude Code steering batch that would pass the per-Turn user-message bound; the running
    Turn ends."""

    code: str = "turn_message_bound_exceeded"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEnded(AdapterError):
    """Input for a native Turn that has already ended."""

    code: str = "turn_ended"


def is_terminal(error: object) -> bool:
    """True for a terminal adapter error: the caller fails the work and never retries it."""
    return isinstance(error, AdapterError) and error.terminal

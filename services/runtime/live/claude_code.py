"""Claude Code's live harness (``services.runtime.claude_live``), found by ``live.build``."""

from services.runtime.claude_live import ClaudeLive, build

__all__ = ["ClaudeLive", "build"]

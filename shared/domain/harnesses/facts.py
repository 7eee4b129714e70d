"""The facts a native observation carries (CONTRACT §2), the same for every harness: a function
call the harness made, and the end of a native Turn. Each harness module classifies its own
records into these (``classify_all``); ``shared.domain.observations`` dispatches by harness."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallOpened:
    call_id: str
    name: str
    arguments: Any
    native_ids: dict[str, Any]


@dataclass(frozen=True)
class TurnEnded:
    state: str  # completed | failed
    native_turn_id: str | None


Fact = CallOpened | TurnEnded

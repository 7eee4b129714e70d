"""Waiting for a Turn (``?wait=true&timeout_ms=N``, CONTRACT §1): the query parameters, the
bounds on concurrent waits, and which Items answer a waiting request. Pure: no Kafka, store or
HTTP import (the HTTP layer feeds Items in and reads the answer out; docs/admission.md "Waiting
for the Turn").

The Items of a wait are the Items the input produced, then every later Item of the Turn they
belong to, up to and including the Turn's terminal ``turn`` Item — plus, for a function result,
the ``function_call_application`` Item of that call (it may follow the Turn's end; the wait is
over only when both are known). A repeat under the same idempotency id starts from the same
input Items, so its wait answers the same Turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.domain.errors import ApiError, invalid

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
TERMINAL_TURN_STATES = ("completed", "failed")
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WaitRequest:
    wait: bool
    timeout_ms: int = DEFAULT_TIMEOUT_MS


def parse_wait(params: Mapping[str, str]) -> WaitRequest | ApiError:
    """``wait`` (true/false, 1/0, yes/no; default false) and ``timeout_ms`` (a decimal integer
    of at least 1; default 120000). A budget above 600000 is *capped* at 600000 (CONTRACT §1 and
    seed 004: "capped at 600000"), whatever its size. A ``timeout_ms`` is checked even without
    ``wait=true``: anything that is not an integer ≥ 1 (``0``, ``-1``, ``1.5``, ``+1``, ``""``,
    non-ASCII digits) is a 400."""
    raw_wait = params.get("wait", "false").strip().lower()
    if raw_wait in _TRUE:
        wait = True
    elif raw_wait in _FALSE:
        wait = False
    else:
        return invalid("wait must be true or false", "wait")
    raw_timeout = params.get("timeout_ms")
    if raw_timeout is None:
        return WaitRequest(wait)
    text = raw_timeout.strip()
    if not text.isascii() or not text.isdigit():
        return invalid("timeout_ms must be a positive integer (milliseconds; capped at "
                       f"{MAX_TIMEOUT_MS})", "timeout_ms")
    digits = text.lstrip("0")
    # more digits than the cap has: above it (no int() of an arbitrarily long string)
    budget = MAX_TIMEOUT_MS if len(digits) > len(str(MAX_TIMEOUT_MS)) else int(digits or "0")
    if budget < 1:
        return invalid("timeout_ms must be a positive integer (milliseconds; capped at "
                       f"{MAX_TIMEOUT_MS})", "timeout_ms")
    return WaitRequest(wait, min(budget, MAX_TIMEOUT_MS))


@dataclass
class WaitSlots:
    """Concurrent waits of one replica: at most ``per_replica`` in all and ``per_tenant`` for
    any one tenant. ``acquire`` is decided before anything is admitted (a 429 writes nothing)."""

    per_replica: int
    per_tenant: int
    total: int = 0
    by_tenant: dict[str, int] = field(default_factory=dict)

    def acquire(self, tenant: str) -> bool:
        held = self.by_tenant.get(tenant, 0)
        if self.total >= self.per_replica or held >= self.per_tenant:
            return False
        self.total += 1
        self.by_tenant[tenant] = held + 1
        return True

    def release(self, tenant: str) -> None:
        held = self.by_tenant.get(tenant, 0)
        if held <= 0:
            return
        self.total -= 1
        if held == 1:
            del self.by_tenant[tenant]
        else:
            self.by_tenant[tenant] = held - 1


def turn_of(items: list[Json]) -> str | None:
    """The Turn the input Items started or joined (the last ``turn_id`` among them)."""
    turn_id = None
    for it in items:
        turn_id = it.get("turn_id") or turn_id
    return turn_id


class TurnWatch:
    """The Items answering one wait, fed from the answer, the store and ``session.items`` in any
    order and with repeats; ``items()`` is always in ``sequence`` order."""

    def __init__(self, input_items: list[Json]) -> None:
        self.turn_id = turn_of(input_items)
        self.start = min((int(it["sequence"]) for it in input_items), default=0)
        self.pending_calls = {
            str(it["call_id"]) for it in input_items if it.get("type") == "function_call_output"
        }
        # No Turn to wait for (a function result outside any Turn): only its application.
        self.turn_over = self.turn_id is None
        self._items: dict[int, Json] = {}
        for it in input_items:
            self._keep(it)

    @property
    def after(self) -> int:
        """The highest sequence known so far (a store read continues from here)."""
        return max(self._items, default=self.start)

    @property
    def done(self) -> bool:
        return self.turn_over and not self.pending_calls

    def offer(self, item: Json) -> bool:
        """Take ``item`` if it belongs to this wait and is new; True when taken."""
        seq = item.get("sequence")
        if not isinstance(seq, int) or seq < self.start or seq in self._items:
            return False
        if item.get("type") == "function_call_application":
            if item.get("call_id") not in self.pending_calls:
                return False
        elif self.turn_id is None or item.get("turn_id") != self.turn_id:
            return False
        self._keep(item)
        return True

    def turn_ended_before(self, current_turn_id: str | None, running: bool) -> None:
        """The Session document's view: when our Turn is no longer the running one, its end is
        durable — in the Items read after ``start``, or before the input (a result that arrived
        after its Turn ended)."""
        if self.turn_id is not None and not (current_turn_id == self.turn_id and running):
            self.turn_over = True

    def items(self) -> list[Json]:
        return [self._items[s] for s in sorted(self._items)]

    def _keep(self, item: Json) -> None:
        public = {k: v for k, v in item.items() if k != "schema"}
        self._items[int(public["sequence"])] = public
        if public.get("type") == "function_call_application":
            self.pending_calls.discard(str(public.get("call_id")))
        if (public.get("type") == "turn" and public.get("turn_id") == self.turn_id
                and public.get("state") in TERMINAL_TURN_STATES):
            self.turn_over = True

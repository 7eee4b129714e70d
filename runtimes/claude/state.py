"""What the Claude Code driver keeps per Core Session and per native Turn."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses.claude_code import ClaudeTurn

Json = dict[str, Any]


@dataclass
class Turn:
    core_turn_id: str
    delivery: Json  # the opening delivery (a failure is reported as its refusal)
    bound: ClaudeTurn
    unconsumed: set[str] = field(default_factory=set)  # native uuids written, not yet replayed
    written: set[str] = field(default_factory=set)  # every native uuid written in this Turn
    running: set[str] = field(default_factory=set)  # its commands started, not yet finished
    interrupt_id: str | None = None  # the request id of our interrupt, once sent
    end_reason: str | None = None  # why the bridge ended it itself (on its end's envelope)
    ending: bool = False  # we ended it (interrupt): the next result is its end
    timer: asyncio.TimerHandle | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)


    def interrupted_idle(self, native: Json) -> bool:
        """``native`` answers our interrupt and none of this Turn's commands was running."""
        response = native.get("response")
        return (self.ending and isinstance(response, dict)
                and response.get("request_id") == self.interrupt_id
                and response.get("subtype") == "success" and not self.running)

@dataclass
class Session:
    core_session_id: str
    home: Path
    native_id: str = ""
    proc: asyncio.subprocess.Process | None = None
    reader: asyncio.Task[None] | None = None
    bridge: asyncio.AbstractServer | None = None
    turn: Turn | None = None
    last_turn_id: str | None = None
    ended_turns: set[str] = field(default_factory=set)
    root_calls: set[str] = field(default_factory=set)  # live root public tool_use ids seen
    sub_calls: set[str] = field(default_factory=set)  # subagent tool_use ids seen
    waiters: dict[str, asyncio.Future[Json]] = field(default_factory=dict)  # bridge calls
    answers: dict[str, Json] = field(default_factory=dict)  # results before the bridge asked
    answered: set[str] = field(default_factory=set)  # answered by Core, or released
    seen: asyncio.Event = field(default_factory=asyncio.Event)  # a record arrived
    printed: asyncio.Event = field(default_factory=asyncio.Event)  # this process printed

    def note(self, native: Json) -> None:
        """The bookkeeping every printed record feeds: replayed messages are consumed, the
        calls seen (root or subagent) and the Turn's commands running."""
        self.seen.set()
        self.printed.set()
        kind = native.get("type")
        turn = self.turn
        if kind == "user" and native.get("isReplay") is True and turn is not None:
            uid = native.get("uuid")
            if isinstance(uid, str):
                turn.unconsumed.discard(uid)
                turn.bound.consumed(uid)
        if kind == "assistant":
            # The root calls are the public calls Core opens, by Core's own classifier: a
            # replayed or synthetic copy of a ``tool_use`` is none (``claude.tool_uses``).
            self.root_calls.update(c.call_id for c in claude.tool_uses(native))
            if native.get("parent_tool_use_id") is not None:
                msg = native.get("message")
                for block in (msg.get("content") if isinstance(msg, dict) else None) or []:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        self.sub_calls.add(str(block.get("id")))
        if kind == "command_lifecycle" and turn is not None:
            cu = str(native.get("command_uuid"))
            if cu in turn.written:
                if native.get("state") == "started":
                    turn.running.add(cu)
                elif native.get("state") in ("completed", "cancelled"):
                    turn.running.discard(cu)

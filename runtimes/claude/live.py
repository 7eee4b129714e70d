"""The live harness for Claude Code: one real ``claude`` process per Core Session.

``claude -p --input-format stream-json --output-format stream-json --verbose
--replay-user-messages`` (``runtimes.claude.process``) reads native user messages on
stdin; every record it prints on stdout is forwarded as a ``runtime.observation/1`` envelope,
``native`` exactly as printed.

* ``start`` / ``steer``: each public message becomes one native user message with a fresh UUID
  (``shared.domain.harnesses.claude_code``: text blocks verbatim, ``input_image`` → a base64 image
  block). The bridge's native Turn counts at most 64 user messages, the opening prompt
  included (``ClaudeTurn``); a steering batch that would pass it is refused before any part of
  it is written, and the running native Turn is interrupted (``control_request`` ``interrupt``):
  Claude Code then prints ``result`` ``error_during_execution``, forwarded like any record, and
  Core fails the Turn. A batch is applied once every message of it is replayed
  (``isReplay: true``, our UUID).
* The bridge's native Turn runs from the opening prompt until a ``result`` printed when every
  message written in it was replayed. A steer written while the model streams text is queued by
  Claude Code and run as a follow-up command after an intermediate ``result``; that record is
  forwarded with ``native_turn_continues: true`` (storage does not end Core's Turn on it).
* ``interrupt`` (Core failed the Turn: the dispatcher refused an input of it) of the running
  Turn: interrupted as for the bound; its ``result`` is forwarded with Core's reason as
  ``end_reason``. For a Turn not running here it does nothing.
* Public functions: an MCP server (``runtimes.claude.mcp``) that Claude Code starts
  relays each root ``mcp__core__<name>`` call over a Unix socket to this object and blocks
  until Core's ``function_result`` delivery arrives; the result is answered as MCP content
  (text blocks, image blocks in order; ``isError`` when ``success`` is false). A call made by a
  subagent (``parent_tool_use_id`` set) is not a public call: it is answered with an error.
* Faults: a process that exits, prints a line that is not a JSON object, or runs a Turn past
  ``turn_timeout_s`` fails the running Turn with a reason (a terminal refusal record for the
  Turn's delivery), is killed, and is started again on the Session's next delivery — lazily,
  so a harness that keeps failing never crash-loops. Bad lines are logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Mapping
from functools import partial
from typing import Any

from runtimes.claude import process as claude_process
from runtimes.claude.bridge import (
    corrupt_blocks,
    mcp_content,
    relay,
    write_mcp_config,
)
from runtimes.claude.state import Session, Turn
from runtimes.live import (
    LiveDriver,
    LiveOptions,
    envelope,
    json_line,
    parse_record,
    session_worker,
    spawn,
    stop_process,
)
from runtimes.traces import own_time
from shared.domain.harnesses import claude_code as claude
from shared.domain.harnesses.claude_code import ClaudeTurn
from shared.domain.harnesses.errors import AdapterError, TurnBoundExceeded
from shared.domain.whitespace import is_whitespace_only
from shared.domain.wire import REFUSAL_TURN_BOUND_EXCEEDED, REFUSAL_TURN_ENDED
from shared.logging import get_logger

log = get_logger(__name__)

HARNESS = claude.HARNESS
INTERRUPT_GRACE_S = 15.0  # an interrupted Turn that prints no result by then: the process is killed

Json = dict[str, Any]


class ClaudeLive(LiveDriver):
    """``LiveHarness`` for Claude Code (``runtimes.live``): stream-json and the MCP bridge."""

    harness = HARNESS
    tmp_prefix = "session-core-claude-"

    def __init__(self, options: LiveOptions) -> None:
        super().__init__(options)
        self.settings = claude_process.ClaudeSettings(
            model_base_url=options.model_base_url,
            api_key=os.environ.get(options.api_key_env, "session-core-local"),
            model=options.model if options.model and options.model != "scripted" else None,
            images=options.images,
            binary=options.binary or claude_process.default_binary())
        self._sessions: dict[str, Session] = {}
        self._stopped = False

    # ------------------------------------------------------------------ LiveHarness

    async def stop(self) -> None:
        self._stopped = True
        for s in list(self._sessions.values()):
            if s.turn is not None and s.turn.timer is not None:
                s.turn.timer.cancel()
            await self._kill(s)
        self._cancel_tasks()
        self._sessions.clear()
        self._remove_root()

    async def handle(self, delivery: Mapping[str, Any]) -> None:
        if not self._accept(delivery):
            return
        sid = str(delivery.get("session_id"))
        session = self._sessions.get(sid)
        if session is None:
            home = self.root / f"s-{uuid.uuid4().hex[:12]}"
            home.mkdir(parents=True)
            session = self._sessions[sid] = Session(sid, home)
        # Handed to the Session's worker, not awaited: a Session whose process is starting or
        # whose superseded Turn is still ending never delays another Session's deliveries.
        self._hand_over(sid, dict(delivery), partial(self._work, session))

    async def _work(self, s: Session, inbox: asyncio.Queue[Json]) -> None:
        def failed(e: Exception) -> str:
            log.exception("claude.delivery_error", session_id=s.core_session_id)
            return f"the runtime failed to hand the delivery over: {e!r}"

        await session_worker(inbox, partial(self._messages, s),
                             partial(self._function_result, s), partial(self._interrupt, s),
                             self._refuse, failed)

    # ------------------------------------------------------------------ emitting

    def _observe(self, s: Session, native: Json, **extra: Any) -> None:
        turn_id = s.turn.core_turn_id if s.turn else s.last_turn_id
        rec = envelope(self.options.runtime_id, HARNESS, s.core_session_id, turn_id, native)
        rec.update(extra)
        self._out([rec])

    # ------------------------------------------------------------------ process

    async def _spawn(self, s: Session) -> None:
        s.native_id = str(uuid.uuid4())
        s.printed = asyncio.Event()
        sock = s.home / f"b{uuid.uuid4().hex[:8]}.sock"
        s.bridge = await asyncio.start_unix_server(
            lambda r, w: relay(s, r, w), path=str(sock))
        mcp = write_mcp_config(s.home, sock, self.options.functions)
        cmd = claude_process.command(self.settings, mcp_config=mcp,
                                     tools=[f["name"] for f in self.options.functions],
                                     session_id=s.native_id)
        s.proc = await spawn(cmd, cwd=s.home, env=claude_process.environment(self.settings, s.home),
                             stderr=False, preexec_fn=claude_process.die_with_parent)
        s.reader = own_time(self._read(s, s.proc), name=f"claude:{s.core_session_id}")
        log.info("claude.started", session_id=s.core_session_id, native_session_id=s.native_id,
                 pid=s.proc.pid)

    async def _kill(self, s: Session) -> None:
        # Everything of this process is taken off the Session before the first await: a
        # delivery handled while the process is reaped may start the next one, whose reader,
        # bridge and waiters this must not touch.
        proc, s.proc = s.proc, None
        reader, s.reader = s.reader, None
        bridge, s.bridge = s.bridge, None
        waiters, s.waiters = s.waiters, {}
        for fut in waiters.values():
            if not fut.done():
                fut.cancel()
        s.printed.set()  # releases an interrupt grace still waiting for this process
        if bridge is not None:
            bridge.close()
        if proc is not None:
            await stop_process(proc)
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    async def _write(self, s: Session, record: Json) -> None:
        assert s.proc is not None and s.proc.stdin is not None
        s.proc.stdin.write(json_line(record))
        await s.proc.stdin.drain()

    async def _read(self, s: Session, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        reason = None
        while True:
            try:
                line = await proc.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError) as e:
                reason = f"the harness printed an unreadable line ({e})"
                break
            if not line:
                break
            if not line.strip():
                continue
            native = parse_record(line)
            if native is None:
                self.bad_lines += 1
                log.warning("claude.bad_line", session_id=s.core_session_id,
                            bad_lines=self.bad_lines, line=line[:200].decode(errors="replace"))
                reason = "the harness printed a line that is not a JSON record"
                break
            self._on_record(s, native)
        if s.proc is proc:
            code = proc.returncode
            if reason is None:
                with contextlib.suppress(Exception):
                    code = await asyncio.wait_for(proc.wait(), 2)
                reason = f"the harness process exited (code {code})"
            await self._fail(s, reason)

    async def _fail(self, s: Session, reason: str) -> None:
        """The process failed: the running Turn fails with ``reason``; the process is gone and
        is started again on the next delivery (never in a loop)."""
        turn = s.turn
        log.error("claude.failed", session_id=s.core_session_id, reason=reason,
                  turn_id=turn.core_turn_id if turn else None)
        if turn is not None:
            self._finish(s, turn)
            self._refuse(turn.delivery, reason)
        self.restarts += 1
        await self._kill(s)

    # ------------------------------------------------------------------ records

    def _on_record(self, s: Session, native: Json) -> None:
        s.note(native)
        kind = native.get("type")
        turn = s.turn
        if kind == "control_response" and turn is not None and turn.interrupted_idle(native):
            # The interrupt found none of this Turn's commands running (all of them still
            # queued, now cancelled, or finished with an intermediate result): Claude Code
            # prints no ``result`` for it, so the Runtime ends the Turn itself, marked.
            self._observe(s, native)
            self._end_observed(s, turn, {
                "type": "result", "subtype": "error_during_execution", "is_error": True,
                "session_id": s.native_id, "synthesized": True,
                "errors": ["interrupted while none of its commands ran (the queued ones "
                           "cancelled)"]})
            return
        released = self._released_calls(s, native) if kind == "user" else []
        if kind == "result" and turn is not None:
            if turn.unconsumed and not turn.ending:
                # A queued steer runs next as a follow-up command: the bridge's Turn goes on.
                self._observe(s, native, native_turn_continues=True)
                return
            self._end_observed(s, turn, native)
            return
        self._observe(s, native)
        for call_id in released:
            # The harness printed this call's result itself (an interrupt rejects a running
            # call: ``tool_result_meta`` ``non_execution_kind: "user-rejected"``): the call is
            # released natively, and a result Core delivers later is refused.
            self._observe(s, {"type": "tool_release", "session_id": s.native_id,
                              "tool_use_id": call_id, "synthesized": True})

    def _end_observed(self, s: Session, turn: Turn, native: Json) -> None:
        if turn.end_reason is not None:
            self._observe(s, native, end_reason=turn.end_reason)
        else:
            self._observe(s, native)
        self._finish(s, turn)

    def _released_calls(self, s: Session, native: Json) -> list[str]:
        """Root calls that a live root ``tool_result`` answers although Core never did. Live
        root by Core's own classifier (``claude.is_live_root``: a flag other than absent or
        exactly ``false`` is not live), so the Runtime never releases a call on a record Core
        does not count."""
        if not claude.is_live_root(native):
            return []
        msg = native.get("message")
        out = []
        for block in (msg.get("content") if isinstance(msg, dict) else None) or []:
            if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                continue
            call_id = str(block.get("tool_use_id"))
            if call_id in s.root_calls and call_id not in s.answered:
                s.answered.add(call_id)
                s.answers.pop(call_id, None)
                out.append(call_id)
        return out

    def _finish(self, s: Session, turn: Turn) -> None:
        if turn.timer is not None:
            turn.timer.cancel()
        turn.bound.finish("ended")
        turn.ended.set()
        s.ended_turns.add(turn.core_turn_id)
        s.last_turn_id = turn.core_turn_id
        if s.turn is turn:
            s.turn = None
        log.info("turn.ended", session_id=s.core_session_id, turn_id=turn.core_turn_id)

    # ------------------------------------------------------------------ messages

    async def _messages(self, s: Session, d: Json) -> None:
        turn_id = str(d.get("turn_id"))
        messages = d.get("messages")
        if not isinstance(messages, list) or not messages:
            self._refuse(d, "a message delivery needs messages")
            return
        turn = s.turn
        steering = (d.get("kind") == "steer" and turn is not None
                    and turn.core_turn_id == turn_id)
        problem = self._unrunnable(messages)
        if problem is not None:
            self._refuse(d, problem)
            if steering:
                # Core fails its Turn on this refusal: the native Turn ends too, so that its
                # later calls and its end do not land on a Turn Core shows as failed.
                assert turn is not None
                turn.end_reason = problem
                await self._end_native_turn(s, turn)
            return
        if not steering and turn_id in s.ended_turns:
            self._refuse(d, f"the native turn of {turn_id} has ended", code=REFUSAL_TURN_ENDED)
            return
        if steering:
            assert turn is not None
            encoded = turn.bound.steer(str(d.get("delivery_id")), messages)
            if isinstance(encoded, TurnBoundExceeded):
                # Refused before any part is written; the running native Turn ends.
                why = f"{encoded.code}: {encoded.message}"
                self._refuse(d, why, code=REFUSAL_TURN_BOUND_EXCEEDED)
                turn.end_reason = why
                await self._end_native_turn(s, turn)
                return
        else:
            if turn is not None:  # a new start supersedes the running Turn
                await self._end_native_turn(s, turn, settle=True)
            if s.proc is None or s.proc.returncode is not None:
                if s.proc is not None:
                    await self._kill(s)
                try:
                    await self._spawn(s)
                except OSError as e:
                    self._refuse(d, f"the harness could not start: {e}")
                    return
            turn = Turn(turn_id, d, ClaudeTurn(native_session_id=s.native_id))
            s.turn = turn
            s.last_turn_id = turn_id
            opened = turn
            turn.timer = asyncio.get_running_loop().call_later(
                self.options.turn_timeout_s, lambda: self._spawn_task(self._hung(s, opened)))
            encoded = turn.bound.open(str(d.get("delivery_id")), messages)
        if isinstance(encoded, AdapterError):
            why = f"{encoded.code}: {encoded.message}"
            self._refuse(d, why)
            turn.end_reason = why  # Core fails its Turn on the refusal: the native one ends too
            await self._end_native_turn(s, turn)
            return
        for native in encoded:
            native = {**native, "message": {**native["message"],
                                            "content": corrupt_blocks(
                                                native["message"]["content"],
                                                self.options.corrupt)}}
            turn.unconsumed.add(native["uuid"])
            turn.written.add(native["uuid"])
            try:
                await self._write(s, native)
            except (ConnectionError, AssertionError) as e:
                await self._fail(s, f"the harness process is gone ({e!r})")
                return

    async def _interrupt(self, s: Session, d: Json) -> None:
        """Core failed this Turn (the dispatcher refused an input of it): the running native
        Turn is interrupted as for the bound, and its ``result`` is forwarded with Core's
        reason as ``end_reason``. Any other Turn is not running here: nothing to end, but it is
        over, so a later steer of it is refused ``turn_ended`` instead of opening a native Turn
        under a Turn Core failed (a restarted process is told of its predecessor's Turns so)."""
        turn = s.turn
        if turn is None or turn.core_turn_id != d.get("turn_id"):
            log.info("claude.interrupt_not_running", session_id=s.core_session_id,
                     turn_id=d.get("turn_id"))
            s.ended_turns.add(str(d.get("turn_id")))
            return
        if turn.end_reason is None:
            turn.end_reason = str(d.get("reason") or "Core failed the Turn")
        await self._end_native_turn(s, turn)

    def _unrunnable(self, messages: list[Json]) -> str | None:
        """Why this model cannot take the batch: an image on a text-only model (rejected,
        never dropped), or a whitespace-only message (Claude Code cannot run it)."""
        if not self.options.images and any(p.get("type") == "input_image" for m in messages
                                           for p in m.get("content", ())):
            return ("unsupported_content: this runtime does not report message image support "
                    "(a text-only model)")
        for i, m in enumerate(messages):
            parts = m.get("content", ())
            if parts and all(p.get("type") == "input_text" and is_whitespace_only(p["text"])
                             for p in parts):
                return f"invalid_input: messages[{i}] is whitespace-only, which Claude Code " \
                       "cannot take"
        return None

    async def _hung(self, s: Session, turn: Turn) -> None:
        if s.turn is turn and not self._stopped:
            await self._fail(s, f"the native Turn ran past {self.options.turn_timeout_s:g} s "
                                "(the harness hangs)")

    async def _end_native_turn(self, s: Session, turn: Turn, *, settle: bool = False
                               ) -> None:
        """Interrupt the running native Turn; its ``result`` is forwarded when printed. A
        harness that prints none within the grace is killed (the Turn fails).

        ``cancel_queued`` (capability ``interrupt_cancel_queued_v1``): messages of this Turn
        that Claude Code has queued but not yet taken are cancelled with it; without it they
        would run later as commands of their own, after Core ended the Turn. With ``settle``
        (a new Turn follows) this returns once the interrupted Turn ended (its ``result``, or
        the process killed after the grace), so the next Turn's messages are neither cancelled
        with it nor taken as part of it, and its records keep its own Turn id."""
        if s.turn is not turn or turn.ending:
            return
        turn.ending = True
        turn.bound.finish("interrupted")
        turn.interrupt_id = f"req_{uuid.uuid4().hex[:12]}"
        try:
            await self._write(s, {"type": "control_request", "request_id": turn.interrupt_id,
                                  "request": {"subtype": "interrupt", "cancel_queued": True}})
        except (ConnectionError, AssertionError):
            await self._fail(s, "the harness process is gone")
            return
        for fut in list(s.waiters.values()):
            if not fut.done():
                fut.set_result({"content": [{"type": "text", "text": "the turn ended"}],
                                "isError": True})

        async def grace() -> None:
            # The grace is for the harness's answer to the interrupt: a process still starting
            # (seconds on a loaded machine) gets it from its first record on; one that never
            # prints at all is the Turn timer's case (_hung).
            await s.printed.wait()
            await asyncio.sleep(INTERRUPT_GRACE_S)
            if s.turn is turn:
                await self._fail(s, "the harness did not end the interrupted Turn")

        self._spawn_task(grace())
        if settle:
            # the grace task above ends the Turn by INTERRUPT_GRACE_S at the latest
            await turn.ended.wait()

    # ------------------------------------------------------------------ function results

    async def _function_result(self, s: Session, d: Json) -> None:
        call_id = str(d.get("call_id"))
        raw = d.get("content")
        content: list[Json] = raw if isinstance(raw, list) else []
        success = d.get("success") is True
        if call_id not in s.root_calls or call_id in s.answered or s.proc is None:
            self._refuse(d, f"no pending call {call_id}: the harness has no such call open",
                         call_id)
            return
        if any(p.get("type") == "input_image" for p in content) and not self.options.images:
            self._refuse(d, "unsupported_content: this runtime does not report function-result "
                            "image support", call_id)
            return
        block = claude.tool_result_block(call_id, success, content)
        if isinstance(block, AdapterError):
            self._refuse(d, f"{block.code}: {block.message}", call_id)
            return
        mcp = mcp_content(content, self.options.corrupt)
        if isinstance(mcp, AdapterError):
            self._refuse(d, f"{mcp.code}: {mcp.message}", call_id)
            return
        answer = {"content": mcp, "isError": not success}
        s.answered.add(call_id)
        fut = s.waiters.pop(call_id, None)
        if fut is not None and not fut.done():
            fut.set_result(answer)
        else:
            s.answers[call_id] = answer


def build(options: LiveOptions) -> ClaudeLive:
    return ClaudeLive(options)

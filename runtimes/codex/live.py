"""The real Codex behind a Runtime: one ``codex app-server`` process per Core Session.

JSON-RPC over the process's stdin/stdout, one JSON object a line (no ``jsonrpc`` field):

* spawn (first delivery of a Session, or after the process died): a private ``CODEX_HOME``
  whose ``config.toml`` points a model provider at ``--model-base-url`` (``wire_api =
  "responses"``, ``env_key``), ``initialize`` (``experimentalApi``) / ``initialized``, then
  ``thread/start`` with ``approvalPolicy: "never"``, ``sandbox: "read-only"``, no environments
  (no shell, no file access: the model can only call the Session's public functions) and the
  public functions as ``dynamicTools``. Outbound traffic other than loopback is sent to a dead
  local proxy, so the binary's own background calls (plugin sync) fail fast and stay local;
* ``start``: the batch flattened by the Codex adapter (``shared.domain.harnesses.codex``: a blank
  line between public messages, images as ``{type: "image", url}`` data URIs unchanged) →
  ``turn/start``; a Turn still running is interrupted first (``turn/interrupt``);
* ``steer`` of the running Turn → ``turn/steer`` with ``expectedTurnId``; a steer Codex refuses
  because the Turn has ended (``adapter.steer_error_ends_turn``) is refused with code
  ``turn_ended`` (Core hands it over again); any other steer error is refused as that error and
  the native Turn is interrupted (Core fails its Turn on the refusal: both end it);
* ``interrupt`` (Core failed the Turn: the dispatcher refused an input of it) of the running
  Turn → ``turn/interrupt``; Codex prints ``turn/completed`` ``interrupted``, forwarded. For
  a Turn not running here it does nothing;
* ``item/tool/call`` (a server request) is held by call id; a ``function_result`` answers it with
  ``{contentItems: [inputText…, inputImage…], success}`` in the delivered order (the output
  parts, then the error text as a final text part — the dispatcher already built that list);
* what the binary prints about the thread is forwarded as observations (``native`` = the line):
  ``turn/started``, ``item/started``, ``item/completed`` (an ``agentMessage`` is what the agent
  said), ``item/tool/call``, ``thread/tokenUsage/updated`` (a Turn's usage), ``turn/completed``,
  ``error``; streaming deltas, rate limits and status pings are not forwarded. Each envelope
  names the Session's thread (``root_thread_id``). A record of another thread (a sub-agent's;
  the config turns sub-agents off) is not forwarded at all: its Turn is not the Session's and
  its calls are not public (tests/unit/test_codex_subthreads.py, on a real record);
* the process dying, hanging (no output for ``turn_timeout_s`` while the model works) or
  printing too many non-JSON lines fails its Turn with a reason: the Runtime emits a
  ``turn/completed`` with ``status: "failed"`` marked ``"synthesized": true`` (the binary never
  printed it) and ``item/released`` for every call still waiting, then the next delivery
  spawns a fresh process (with a growing back-off, so a binary that dies at once never
  crash-loops). Bad lines are logged and counted (``bad_lines``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from cachetools import FIFOCache

from runtimes.codex.config import config_toml, corrupt_items, dynamic_tools
from runtimes.live import (
    EmitFn,
    Json,
    LiveDriver,
    LiveOptions,
    default_binary,
    drain,
    envelope,
    json_line,
    parse_record,
    session_worker,
    spawn,
    stop_process,
)
from runtimes.traces import own_time
from shared.domain.harnesses import AdapterError
from shared.domain.harnesses import codex as adapter
from shared.domain.wire import REFUSAL_TURN_ENDED
from shared.logging import get_logger

log = get_logger(__name__)

HARNESS = adapter.HARNESS
FORWARDED = frozenset({"turn/started", "item/started", "item/completed", "item/tool/call",
                       "thread/tokenUsage/updated", "turn/completed", "error"})
MAX_BAD_LINES = 20  # consecutive non-JSON lines before the process is declared broken
RPC_TIMEOUT_S = 60.0
ENDED_SESSIONS = 10_000  # Sessions whose ended Turns are remembered (the least recent forgotten)

@dataclass
class _Turn:
    core_turn_id: str
    native_turn_id: str
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _Proc:
    core_session_id: str
    process: asyncio.subprocess.Process
    home: Path
    thread_id: str = ""
    turn: _Turn | None = None
    # native turn id → Core turn id, for the envelopes of records about earlier Turns
    turns: FIFOCache[str, str] = field(default_factory=lambda: FIFOCache(1000))
    # Core turn ids whose native Turn has ended: the Session's (``CodexLive._ended``), shared
    # by its successive processes, so a Turn ended by a process's death stays ended for the next
    ended: FIFOCache[str, None] = field(default_factory=lambda: FIFOCache(1000))
    pending: dict[str, tuple[Any, str]] = field(default_factory=dict)  # call → (rpc id, turn)
    waiting: dict[int, asyncio.Future[Json]] = field(default_factory=dict)
    next_id: int = 1
    bad_run: int = 0
    last_output: float = field(default_factory=time.monotonic)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    dead: bool = False


class CodexLive(LiveDriver):
    """``LiveHarness`` for Codex (``runtimes.live``): the app-server's JSON-RPC."""

    harness = HARNESS
    tmp_prefix = "core-codex-"

    def __init__(self, options: LiveOptions) -> None:
        super().__init__(options)
        self.binary = options.binary or default_binary("codex")
        self.sessions: dict[str, _Proc] = {}
        self._deaths: dict[str, list[float]] = {}
        # per Session, across its processes: a steer of a Turn whose process died is refused
        # ``turn_ended`` (Core hands it over again as the next Turn), never run as a new native
        # Turn under the ended Core Turn — which then had two ends on the harness's side
        self._ended: FIFOCache[str, FIFOCache[str, None]] = FIFOCache(ENDED_SESSIONS)

    def _ended_turns(self, sid: str) -> FIFOCache[str, None]:
        """The Session's ended Core Turns, one record across its processes."""
        return self._ended.setdefault(sid, FIFOCache(1000))

    # ------------------------------------------------------------------ LiveHarness

    async def start(self, emit: EmitFn) -> None:
        await super().start(emit)
        self._watchdog = asyncio.create_task(self._watch(), name="codex:watchdog")

    async def stop(self) -> None:
        self._cancel_tasks()
        self._watchdog.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._watchdog
        for proc in list(self.sessions.values()):
            await self._kill(proc)
        self.sessions.clear()
        self._remove_root()

    async def handle(self, delivery: Mapping[str, Any]) -> None:
        if not self._accept(delivery):  # the delivery loop hands over only this Runtime's
            return
        sid = str(delivery.get("session_id"))
        self._hand_over(sid, dict(delivery), partial(self._work, sid))

    async def _work(self, sid: str, queue: asyncio.Queue[Json]) -> None:
        def failed(exc: Exception) -> str:
            if isinstance(exc, _HarnessDown):
                return f"harness_unavailable: {exc}"
            log.exception("codex.delivery_failed", session_id=sid)
            return f"harness_error: {exc!r}"

        await session_worker(queue, partial(self._messages, sid), partial(self._result, sid),
                             partial(self._interrupt, sid), self._refuse, failed)

    # ------------------------------------------------------------------ output

    def _observe(self, proc: _Proc, native: Json | None, turn_id: str | None) -> None:
        rec = envelope(self.options.runtime_id, HARNESS, proc.core_session_id, turn_id, native)
        if proc.thread_id:  # the Session's own thread: records of any other are a subagent's
            rec["root_thread_id"] = proc.thread_id
        self._out([rec])

    # ------------------------------------------------------------------ process

    async def _proc(self, sid: str) -> _Proc:
        proc = self.sessions.get(sid)
        if proc is not None and not proc.dead:
            return proc
        deaths = [t for t in self._deaths.get(sid, []) if time.monotonic() - t < 60]
        if deaths:  # back off: 0.5 s, 1 s, 2 s … up to 10 s after recent deaths
            await asyncio.sleep(min(10.0, 0.5 * 2 ** (len(deaths) - 1)))
        return await self._spawn(sid)

    async def _spawn(self, sid: str) -> _Proc:
        home = self.root / f"{sid}-{int(time.time() * 1000)}"
        (home / "work").mkdir(parents=True, exist_ok=True)
        o = self.options
        (home / "config.toml").write_text(config_toml(o.model_base_url, o.model, o.api_key_env))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_")}
        env.update({
            "CODEX_HOME": str(home), "HOME": str(home),
            o.api_key_env: os.environ.get(o.api_key_env, "local-scripted-model"),
            # loopback only: anything else goes to a dead proxy and fails at once
            "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
            "ALL_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost",
            "RUST_LOG": os.environ.get("SESSION_CORE_CODEX_RUST_LOG", "error"),
        })
        process = await spawn([self.binary, "app-server"], cwd=home / "work", env=env,
                              stderr=True)
        proc = _Proc(sid, process, home, ended=self._ended_turns(sid))
        self.sessions[sid] = proc
        proc.tasks.append(own_time(self._read(proc), name=f"codex:{sid}:out"))
        proc.tasks.append(own_time(drain(process, "codex.stderr", session_id=sid),
                                   name=f"codex:{sid}:err"))
        log.info("codex.spawned", session_id=sid, pid=process.pid)
        await self._request(proc, "initialize", {
            "clientInfo": {"name": "session-core", "version": "1"},
            "capabilities": {"experimentalApi": True}})
        self._write(proc, {"method": "initialized"})
        result = await self._request(proc, "thread/start", {
            "cwd": str(home / "work"), "approvalPolicy": "never", "sandbox": "read-only",
            "environments": [], "ephemeral": True,
            "dynamicTools": dynamic_tools(o.functions)})
        proc.thread_id = str(result["thread"]["id"])
        log.info("codex.thread", session_id=sid, thread_id=proc.thread_id)
        return proc

    def _write(self, proc: _Proc, message: Json) -> None:
        if proc.dead or proc.process.stdin is None:
            raise _HarnessDown("the codex process is not running")
        proc.process.stdin.write(json_line(message))

    async def _request(self, proc: _Proc, method: str, params: Json) -> Json:
        rid = proc.next_id
        proc.next_id += 1
        fut: asyncio.Future[Json] = asyncio.get_running_loop().create_future()
        proc.waiting[rid] = fut
        self._write(proc, {"id": rid, "method": method, "params": params})
        try:
            reply = await asyncio.wait_for(fut, RPC_TIMEOUT_S)
        except TimeoutError:
            await self._died(proc, f"codex did not answer {method} within {RPC_TIMEOUT_S:g} s")
            raise _HarnessDown(f"no answer to {method}") from None
        finally:
            proc.waiting.pop(rid, None)
        if reply.get("down"):
            raise _HarnessDown(f"{method}: {reply['error']['message']}")
        if "error" in reply:
            raise _RpcError(method, reply["error"])
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    async def _read(self, proc: _Proc) -> None:
        assert proc.process.stdout is not None
        reason = "the codex process exited"
        try:
            while line := await proc.process.stdout.readline():
                proc.last_output = time.monotonic()
                message = parse_record(line)
                if message is None:
                    self.bad_lines += 1
                    proc.bad_run += 1
                    log.warning("codex.bad_line", session_id=proc.core_session_id,
                                count=self.bad_lines, line=line[:200].decode(errors="replace"))
                    if proc.bad_run >= MAX_BAD_LINES:
                        reason = f"codex printed {proc.bad_run} lines that are not JSON"
                        break
                    continue
                proc.bad_run = 0
                self._dispatch(proc, message)
        except Exception as exc:  # a line over the limit, a closed pipe
            reason = f"reading codex output failed: {exc!r}"
        code = proc.process.returncode
        await self._died(proc, reason if code is None else f"{reason} (exit code {code})")

    def _dispatch(self, proc: _Proc, message: Json) -> None:
        method = message.get("method")
        if method is None:  # an answer to one of our requests
            fut = proc.waiting.get(message.get("id"))  # type: ignore[arg-type]
            if fut is not None and not fut.done():
                fut.set_result(message)
            return
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        assert isinstance(params, dict)
        thread = params.get("threadId")
        if proc.thread_id and isinstance(thread, str) and thread != proc.thread_id:
            # Another thread of this process (a sub-agent's): not the Session's. Never
            # forwarded — its turn/started is not the Turn's, its turn/completed does not end
            # it, its calls are not public (0.169 gives a sub-agent no dynamic tools anyway).
            if "id" in message:
                self._write(proc, {"id": message["id"], "error": {
                    "code": -32601, "message": f"{method}: only the Session's own thread"}})
            return
        if "id" in message and method != "item/tool/call":
            # approvals and the like: never expected with approvalPolicy "never"
            log.warning("codex.request_declined", method=method)
            self._write(proc, {"id": message["id"],
                               "error": {"code": -32601, "message": f"{method}: not supported"}})
            return
        if method == "turn/started":
            turn = params.get("turn")
            native = turn.get("id") if isinstance(turn, dict) else None
            if proc.turn is not None and isinstance(native, str):
                if not proc.turn.native_turn_id:  # printed before turn/start's answer was read
                    proc.turn.native_turn_id = native
                proc.turns.setdefault(native, proc.turn.core_turn_id)
        if method not in FORWARDED:
            return
        native_turn = params.get("turnId")
        if method in ("turn/started", "turn/completed") and isinstance(params.get("turn"), dict):
            native_turn = params["turn"].get("id")
        core_turn = proc.turns.get(native_turn) if isinstance(native_turn, str) else None
        if method == "item/tool/call":
            call_id = params.get("callId")
            if isinstance(call_id, str):
                proc.pending[call_id] = (message["id"], str(native_turn))
        self._observe(proc, message, core_turn)
        if method == "turn/completed" and proc.turn is not None and (
                native_turn == proc.turn.native_turn_id):
            self._turn_over(proc)

    def _turn_over(self, proc: _Proc) -> None:
        turn = proc.turn
        if turn is None:
            return
        proc.turn = None
        proc.ended[turn.core_turn_id] = None
        turn.done.set()
        for call_id, (_rid, native_turn) in list(proc.pending.items()):
            if native_turn == turn.native_turn_id:
                proc.pending.pop(call_id)

    async def _died(self, proc: _Proc, reason: str) -> None:
        """The process is gone or unusable: fail its Turn (with the reason), release its
        calls, and forget it; the next delivery spawns a fresh one."""
        if proc.dead:
            return
        proc.dead = True
        self._deaths.setdefault(proc.core_session_id, []).append(time.monotonic())
        self.restarts += 1
        log.error("codex.died", session_id=proc.core_session_id, reason=reason,
                  bad_lines=self.bad_lines)
        for fut in proc.waiting.values():
            if not fut.done():
                fut.set_result({"error": {"message": reason}, "down": True})
        turn = proc.turn
        if turn is not None:
            for call_id, (_rid, native_turn) in list(proc.pending.items()):
                if native_turn == turn.native_turn_id:
                    self._observe(proc, {"method": "item/released", "synthesized": True, "params": {
                        "threadId": proc.thread_id, "turnId": native_turn, "callId": call_id,
                        "reason": reason}}, turn.core_turn_id)
            self._observe(proc, {"method": "turn/completed", "synthesized": True, "params": {
                "threadId": proc.thread_id,
                "turn": {"id": turn.native_turn_id, "status": "failed",
                         "error": {"message": reason}}}}, turn.core_turn_id)
            self._turn_over(proc)
        proc.pending.clear()
        with contextlib.suppress(ProcessLookupError):
            proc.process.kill()
        if self.sessions.get(proc.core_session_id) is proc:
            del self.sessions[proc.core_session_id]

    async def _kill(self, proc: _Proc) -> None:
        proc.dead = True
        await stop_process(proc.process)
        for t in proc.tasks:
            t.cancel()
        shutil.rmtree(proc.home, ignore_errors=True)

    async def _watch(self) -> None:
        """A hung process: a Turn is running, no call waits on Core, and the binary printed
        nothing for ``turn_timeout_s``."""
        while True:
            await asyncio.sleep(1.0)
            now = time.monotonic()
            for proc in list(self.sessions.values()):
                if proc.process.returncode is not None and not proc.dead:
                    continue  # the reader reports it
                if (proc.turn is not None and not proc.pending and not proc.dead
                        and now - proc.last_output > self.options.turn_timeout_s):
                    await self._died(proc, "codex printed nothing for "
                                     f"{self.options.turn_timeout_s:g} s during a Turn")

    # ------------------------------------------------------------------ deliveries

    async def _messages(self, sid: str, delivery: Mapping[str, Any]) -> None:
        messages = delivery.get("messages")
        if not isinstance(messages, list) or not messages:
            self._refuse(delivery, "a message delivery needs messages")
            return
        if not self.options.images and any(
                p.get("type") == "input_image" for m in messages for p in m.get("content", ())):
            self._refuse(delivery, "unsupported_content: this runtime does not report message "
                         "image support")
            return
        items = adapter.flatten_messages(messages)
        if isinstance(items, AdapterError):
            self._refuse(delivery, f"{items.code}: {items.message}")
            return
        items = corrupt_items(items, self.options.corrupt, "image", "text")
        turn_id = str(delivery.get("turn_id"))
        proc = self.sessions.get(sid)
        if proc is not None and proc.dead:
            proc = None
        running = proc.turn if proc is not None else None
        if delivery.get("kind") == "steer" and running is not None and (
                running.core_turn_id == turn_id):
            assert proc is not None
            try:
                await self._request(proc, "turn/steer", {
                    "threadId": proc.thread_id, "expectedTurnId": running.native_turn_id,
                    "input": items})
            except _RpcError as exc:
                if adapter.steer_error_ends_turn(exc.error, running.native_turn_id):
                    self._refuse(delivery, f"the native turn of {turn_id} has ended: {exc}",
                                 code=REFUSAL_TURN_ENDED)
                    return
                # Any other error leaves the native Turn running while Core fails its Turn
                # on this refusal: the Runtime ends the native Turn too, so the two agree.
                self._refuse(delivery, f"codex refused turn/steer: {exc}")
                with contextlib.suppress(_RpcError, _HarnessDown):
                    await self._request(proc, "turn/interrupt", {
                        "threadId": proc.thread_id, "turnId": running.native_turn_id})
            return
        if turn_id in self._ended.get(sid, ()):
            self._refuse(delivery, f"the native turn of {turn_id} has ended",
                         code=REFUSAL_TURN_ENDED)
            return
        proc = await self._proc(sid)
        if proc.turn is not None:  # a new start supersedes the running Turn
            old = proc.turn
            with contextlib.suppress(_RpcError):
                await self._request(proc, "turn/interrupt", {
                    "threadId": proc.thread_id, "turnId": old.native_turn_id})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(old.done.wait(), 10)
            if proc.turn is old:
                self._turn_over(proc)
        # The Turn is current before turn/start is answered: Codex may print turn/started (and
        # more) right behind the answer, before this coroutine resumes.
        turn = proc.turn = _Turn(turn_id, "")
        try:
            result = await self._request(proc, "turn/start", {
                "threadId": proc.thread_id, "input": items})
        except _RpcError as exc:
            if proc.turn is turn:
                proc.turn = None
            self._refuse(delivery, f"codex refused turn/start: {exc}")
            return
        native_turn = str(result["turn"]["id"])
        turn.native_turn_id = native_turn
        proc.turns[native_turn] = turn_id
        log.info("turn.started", session_id=sid, turn_id=turn_id, native_turn_id=native_turn)

    async def _interrupt(self, sid: str, delivery: Mapping[str, Any]) -> None:
        """Core failed this Turn (the dispatcher refused an input of it): ``turn/interrupt``
        the native Turn if it is the one running. Codex answers at once and prints the end,
        ``turn/completed`` ``interrupted`` (with ``item/completed`` ``failed`` for a call it
        waited on), forwarded as any record. Any other Turn is not running here: nothing to
        end, but it is over, so a later steer of it is refused ``turn_ended`` instead of opening
        a native Turn under a Turn Core failed (a restarted process is told of its
        predecessor's Turns so)."""
        proc = self.sessions.get(sid)
        running = proc.turn if proc is not None and not proc.dead else None
        if proc is None or running is None or running.core_turn_id != delivery.get("turn_id"):
            log.info("codex.interrupt_not_running", session_id=sid,
                     turn_id=delivery.get("turn_id"))
            self._ended_turns(sid)[str(delivery.get("turn_id"))] = None
            return
        log.info("codex.interrupt", session_id=sid, turn_id=running.core_turn_id,
                 native_turn_id=running.native_turn_id, reason=delivery.get("reason"))
        with contextlib.suppress(_RpcError, _HarnessDown):
            await self._request(proc, "turn/interrupt", {
                "threadId": proc.thread_id, "turnId": running.native_turn_id})

    async def _result(self, sid: str, delivery: Mapping[str, Any]) -> None:
        call_id = str(delivery.get("call_id"))
        content = delivery.get("content")
        content = content if isinstance(content, list) else []
        proc = self.sessions.get(sid)
        # item/started reaches Core a moment before the item/tool/call request is read here
        for _ in range(40):
            if proc is None or proc.dead or call_id in proc.pending:
                break
            await asyncio.sleep(0.05)
        if proc is None or proc.dead or call_id not in proc.pending:
            self._refuse(delivery, f"no pending call {call_id}: the harness is not waiting for "
                         "this result", call_id)
            return
        if not self.options.images and any(p.get("type") == "input_image" for p in content):
            self._refuse(delivery, "unsupported_content: this runtime does not report "
                         "function-result image support", call_id)
            return
        response = adapter.function_result_response(delivery.get("success") is True, content)
        if isinstance(response, AdapterError):
            self._refuse(delivery, f"{response.code}: {response.message}", call_id)
            return
        response["contentItems"] = corrupt_items(response["contentItems"], self.options.corrupt,
                                                 "inputImage", "inputText")
        rpc_id, _turn = proc.pending.pop(call_id)
        self._write(proc, {"id": rpc_id, "result": response})
        log.info("call.answered", session_id=sid, call_id=call_id,
                 parts=len(response["contentItems"]))


class _HarnessDown(Exception):
    pass


class _RpcError(Exception):
    def __init__(self, method: str, error: Any) -> None:
        self.error = error  # the JSON-RPC error as codex answered it
        message = error.get("message") if isinstance(error, dict) else error
        super().__init__(f"{method}: {message}")


def build(options: LiveOptions) -> CodexLive:
    return CodexLive(options)

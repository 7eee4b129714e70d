"""Live harnesses: the Runtime's real engine (``session-core runtime --engine real``).

A ``LiveHarness`` drives real harness processes (one per Core Session) and emits the same
``runtime.observation/1`` envelopes as the simulated harness (``runtimes.harness``):
``native`` is exactly what the real binary printed, refusals carry ``native: null`` and a
``refusal`` object. ``RuntimeService`` (``runtimes.app``) plugs one in instead of the
``SimulatedHarness``; the Kafka loop (registration, deliveries, ordered publishing, control) is
the same for both engines.

Each harness's Runtime side sits in its own package — ``runtimes.codex`` and
``runtimes.claude`` — whose ``live`` module exposes ``build(options: LiveOptions) ->
LiveHarness``; ``build`` below picks it from ``DRIVERS``. Both drivers are a ``LiveDriver``:
what does not depend on the harness's protocol — deliveries taken once and handed to one worker
per Session, refusals, the work directory, and the child process (``spawn``, ``drain``,
``parse_record``, ``json_line``, ``stop_process``) — is here; each driver holds its protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from cachetools import FIFOCache

from runtimes.simulation import Emit
from runtimes.traces import NativeCalls
from shared import records
from shared.logging import get_logger

Json = dict[str, Any]
EmitFn = Callable[[list[Emit]], None]
log = get_logger(__name__)

# The public functions a Runtime exposes to its harness when none are configured: the demo's
# and the tests' function. A Runtime setting (``--functions FILE``), not part of a delivery:
# Core's wire (CONTRACT §2) carries no function list (docs/harnesses.md).
DEFAULT_FUNCTIONS: list[Json] = [
    {
        "name": "get_weather",
        "description": "The current weather for a city (answered by the Core client).",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
]


@dataclass
class LiveOptions:
    """Everything a live harness needs from the Runtime's command line / environment."""

    runtime_id: str
    harness: str
    model_base_url: str  # e.g. http://127.0.0.1:8765/v1 (Codex) or http://127.0.0.1:8765
    model: str = "scripted"
    api_key_env: str = "SESSION_CORE_MODEL_API_KEY"  # the variable holding the provider key
    images: bool = True  # the model accepts images (``--no-images``: a text-only model)
    functions: list[Json] = field(default_factory=lambda: list(DEFAULT_FUNCTIONS))
    binary: str | None = None  # the harness executable (default: the cached install)
    work_dir: Path | None = None  # private homes / cwd per Session (default: a temp dir)
    turn_timeout_s: float = 300.0  # a native Turn that runs longer is failed (a hung process)
    corrupt: str | None = None  # conformance only: "drop_image" | "alter_text"
    extra: dict[str, Any] = field(default_factory=dict)


class LiveHarness(Protocol):
    harness: str

    def capabilities(self) -> dict[str, bool]: ...

    async def start(self, emit: EmitFn) -> None: ...

    async def handle(self, delivery: Mapping[str, Any]) -> None: ...

    async def stop(self) -> None: ...


# harness → the module of its live driver
DRIVERS: Mapping[str, str] = {
    "codex": "runtimes.codex.live",
    "claude_code": "runtimes.claude.live",
}


def build(options: LiveOptions) -> LiveHarness:
    module = importlib.import_module(DRIVERS[options.harness])
    harness: LiveHarness = module.build(options)
    return harness


async def stop_engine(live: LiveHarness | None) -> None:
    """The real engine's harness processes stopped, if it runs them; a failure is logged and
    the Runtime's stop goes on."""
    if live is not None:
        try:
            await live.stop()
        except Exception:
            log.exception("runtime.live_stop_failed")


def envelope(runtime_id: str, harness: str, session_id: str, turn_id: str | None,
             native: Json | None) -> Json:
    """A ``runtime.observation/1`` record (the outbox stamps ``observed_at``)."""
    return records.observation_record(
        runtime_id=runtime_id, session_id=session_id, harness=harness, native=native,
        turn_id=turn_id, observation_id=f"obs_{uuid.uuid4().hex}")


def refusal(runtime_id: str, harness: str, delivery: Mapping[str, Any], reason: str,
            call_id: str | None = None, code: str | None = None) -> Json:
    """A terminal refusal record (``native: null``), shaped as the simulated harness's."""
    body: Json = {"delivery_id": delivery.get("delivery_id"), "kind": delivery.get("kind"),
                  "reason": reason, "terminal": True}
    if code is not None:
        body["code"] = code
    if call_id is not None:
        body["call_id"] = call_id
    turn_id = delivery.get("turn_id")
    rec = envelope(runtime_id, harness, str(delivery.get("session_id")),
                   turn_id if isinstance(turn_id, str) else None, None)
    rec["refusal"] = body
    return rec


D = TypeVar("D", bound=Mapping[str, Any])


async def session_worker(inbox: asyncio.Queue[D], messages: Callable[[D], Awaitable[None]],
                         function_result: Callable[[D], Awaitable[None]],
                         interrupt: Callable[[D], Awaitable[None]],
                         refuse: Callable[[D, str], None],
                         failed: Callable[[Exception], str]) -> None:
    """One Session's deliveries, in order: ``start`` / ``steer`` to ``messages``,
    ``function_result`` to ``function_result``, ``interrupt`` (Core failed the Turn: end it
    natively) to ``interrupt``, any other kind refused. In order matters for ``interrupt``: it
    comes after the ``start`` of its Turn, so that Turn is running natively when it is handled.
    A delivery that raises is refused with ``failed(exc)`` (called inside the ``except``, so it
    may log the traceback) and the worker goes on: one bad delivery must not stop the Session's
    worker."""
    native = NativeCalls()  # tracing on: each delivery's ``runtime.native <kind>`` span
    while True:
        d = await native.next(inbox)
        try:
            kind = d.get("kind")
            if kind in ("start", "steer"):
                await messages(d)
            elif kind == "function_result":
                await function_result(d)
            elif kind == "interrupt":
                await interrupt(d)
            else:
                refuse(d, f"unknown delivery kind {kind!r}")
        except Exception as exc:
            refuse(d, failed(exc))


class LiveDriver:
    """The part of a live driver that is the same whatever the harness: each delivery taken
    once (``_accept``) and handed to its Session's worker, one per Session so a Session whose
    process is starting never holds up the others (``_hand_over``); records and refusals
    emitted; the work directory (``options.work_dir``, else a temporary one removed on stop);
    the driver's tasks; the counts of bad lines and restarts."""

    harness: str
    tmp_prefix = "session-core-live-"  # the temporary work directory's name

    def __init__(self, options: LiveOptions) -> None:
        self.options = options
        self._emit: EmitFn = lambda _e: None
        self._seen: FIFOCache[str, None] = FIFOCache(10_000)  # delivery ids taken
        self._inboxes: dict[str, asyncio.Queue[Json]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._root = options.work_dir
        self._own_root = False
        self.bad_lines = 0
        self.restarts = 0

    def capabilities(self) -> dict[str, bool]:
        # images in messages and in (successful) function results; a text-only model
        # (--no-images) takes neither
        return {"message_images": self.options.images,
                "function_result_images": self.options.images}

    async def start(self, emit: EmitFn) -> None:
        self._emit = emit
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix=self.tmp_prefix))
            self._own_root = True
        self._root.mkdir(parents=True, exist_ok=True)

    @property
    def root(self) -> Path:
        """The work directory the Sessions' homes live in (set by ``start``)."""
        assert self._root is not None, "start() first"
        return self._root

    def _accept(self, delivery: Mapping[str, Any]) -> bool:
        """False for a delivery already taken (Kafka delivers at least once)."""
        did = str(delivery.get("delivery_id"))
        if did in self._seen:
            log.info("delivery.duplicate", delivery_id=did)
            return False
        self._seen[did] = None
        return True

    def _hand_over(self, sid: str, delivery: Json,
                   work: Callable[[asyncio.Queue[Json]], Coroutine[Any, Any, None]]) -> None:
        """Queue the delivery for its Session's worker, ``work(inbox)``, started with the
        Session's first delivery; returns at once."""
        inbox = self._inboxes.get(sid)
        if inbox is None:
            inbox = self._inboxes[sid] = asyncio.Queue()
            self._spawn_task(work(inbox), name=f"{self.harness}:{sid}:in")
        inbox.put_nowait(delivery)

    def _spawn_task(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def _remove_root(self) -> None:
        if self._own_root and self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)

    def _out(self, records: list[Json]) -> None:
        self._emit([Emit(r) for r in records])

    def _refuse(self, delivery: Mapping[str, Any], reason: str, call_id: str | None = None,
                code: str | None = None) -> None:
        log.warning("delivery.refused", session_id=delivery.get("session_id"),
                    kind=delivery.get("kind"), reason=reason, call_id=call_id)
        self._out([refusal(self.options.runtime_id, self.harness, delivery, reason, call_id,
                           code)])


# ---------------------------------------------------------------------- the child process

LINE_LIMIT = 64 * 1024 * 1024  # the stdout reader's line limit: a record with images is large
STOP_WAIT_S = 5.0  # how long a killed harness process is waited for


async def spawn(argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], stderr: bool,
                preexec_fn: Callable[[], None] | None = None) -> asyncio.subprocess.Process:
    """The harness process, stdin and stdout piped (lines up to ``LINE_LIMIT``); stderr piped
    too with ``stderr`` (read it with ``drain``), else discarded."""
    return await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE if stderr else asyncio.subprocess.DEVNULL,
        cwd=str(cwd), env=dict(env), limit=LINE_LIMIT, preexec_fn=preexec_fn)


async def drain(process: asyncio.subprocess.Process, event: str, **fields: Any) -> None:
    """What the process prints on stderr, logged (debug) line by line, so the pipe never
    fills."""
    assert process.stderr is not None
    while line := await process.stderr.readline():
        log.debug(event, **fields, line=line.decode(errors="replace").rstrip()[:500])


def parse_record(line: bytes) -> Json | None:
    """The JSON object a printed line holds; ``None`` for anything else."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def json_line(message: Json) -> bytes:
    """A message for the harness's stdin: one compact JSON line."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


async def stop_process(process: asyncio.subprocess.Process) -> None:
    """Stdin closed, the process killed if still running, and waited for (``STOP_WAIT_S`` at
    most)."""
    if process.stdin is not None:
        process.stdin.close()
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(process.wait(), STOP_WAIT_S)


def default_binary(name: str) -> str:
    """The harness from the cached install (``python -m deploy.local.stack install``), else PATH."""
    import shutil
    import sys

    env = os.environ.get(f"SESSION_CORE_{name.upper()}_BIN")
    if env:
        return env
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "deploy" / "local"))
    try:
        import stack  # type: ignore[import-not-found]

        path = stack.harness_bin(name)
        if Path(path).exists():
            return str(path)
    except Exception:
        pass
    finally:
        sys.path.remove(str(root / "deploy" / "local"))
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name}: not installed (run `python -m deploy.local.stack "
                                "install` or set SESSION_CORE_{name.upper()}_BIN)")
    return found


__all__ = ["DEFAULT_FUNCTIONS", "LINE_LIMIT", "EmitFn", "LiveDriver", "LiveHarness",
           "LiveOptions", "build", "default_binary", "drain", "envelope", "json_line",
           "parse_record", "refusal", "session_worker", "spawn", "stop_process"]

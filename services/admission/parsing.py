"""Large request bodies are parsed in a child process. ``json`` holds the GIL for the whole
parse, so a thread would not free the event loop: an 8 MB body (the issue's twenty image bombs
in one request) held it ~35 ms, and a tenant sending such bodies back to back held it most of
the time — every other tenant's request waited behind the parses. A body over
``CHILD_PARSE_BYTES`` goes to a pool of ``CHILD_PARSERS`` processes (the same
``parse_json``, the same answers); the event loop only hands the bytes over and takes the
parsed value back. Smaller bodies are parsed in the event loop (a process hop costs more than
their parse).

Everything a large parse costs runs at the image-check threads' lower CPU priority
(``lower_priority``): the child process, and the pool's two helper threads in this process,
which write the body into the child's pipe and read the parsed value back (8 MB each way per
bomb request: their copies and context switches were a quarter of admission's CPU while one
tenant sent bombs, at full priority beside the event loop). A thread inherits the nice value of
the thread that starts it, so the pool's first task is submitted from a thread at the lower
priority (``_start_lowered``). A child that dies (the OOM killer, a signal) breaks the pool:
that request is answered 503 (nothing written, a retry is safe) and the next large body gets a
fresh child.

A large create body is validated in the child too, right after its parse (``BodyCheck``: the
same ``validate_create``, the same limits): what comes back is the body with the verdict, and a
refused body's verdict is a small error — the tenant sending bombs no longer has the event
loop's process unpickle its 8 MB parsed value, base64-decode its 20 images and read their
headers, all while holding the GIL (a thread at the lower priority that holds the GIL and is
descheduled keeps the event loop waiting). An image-check thread waits on the child meanwhile,
so the replica still holds at most ``IMAGE_DECODE_WORKERS`` decodes at once. An event's
validation needs its Session's harness, read after the body: a large event body is parsed here
and validated on an image-check thread as before.

A tenant's large bodies are read and parsed one at a time per replica (``turn``): while one
is being received and parsed, the tenant's next large request waits unread (uvicorn stops
reading a connection whose body the app does not consume, so the client's send blocks), and
takes no CPU. One tenant sending such bodies on many connections then costs the replica one
body's work at a time, and another tenant's large body waits at most for the one the parser is
on, not for a queue of the first tenant's (docs/decisions.md, "A tenant's large bodies take
turns")."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from services.admission.domain.jsonbody import parse_json
from services.admission.priority import lower_priority
from shared.domain import errors
from shared.domain.errors import ApiError
from shared.logging import get_logger

log = get_logger(__name__)

CHILD_PARSE_BYTES = 1 << 20  # 1 MiB: ~4 ms of parsing in the event loop at most
CHILD_PARSERS = 1  # one process: large bodies are parsed one at a time per replica


def _start_lowered(pool: ProcessPoolExecutor) -> None:
    """Start ``pool``'s child and helper threads at the lower priority: its first ``submit``
    starts them from the calling thread, whose nice value they inherit."""
    failure: list[BaseException] = []

    def first() -> None:
        lower_priority()
        try:
            pool.submit(parse_json, b"0").result()
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    starter = threading.Thread(target=first, name="body-parser-start")
    starter.start()
    starter.join()
    if failure:
        raise failure[0]


@dataclass(frozen=True)
class BodyCheck:
    """The validation to run on a large body in the child, after its parse: ``fn(body,
    *args)`` (module-level, picklable, pure). Its verdict comes back with the body
    (``Checked``): a refused body's answer is a small error, not the whole parsed value, and
    its images were decoded — or refused from their headers — in the child, at the lower
    priority, never in this process. A thread of ``slots`` (the image-check pool) waits on the
    child meanwhile, so the replica's decodes at once stay within that pool's size
    (services/admission/domain/validation/limits.py)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    slots: Executor


@dataclass(frozen=True, slots=True)
class Checked:
    """A large body parsed in the child and ``BodyCheck.fn``'s verdict on it (one pickle: the
    verdict's strings are the body's, sent once)."""

    body: Any
    verdict: Any


def parse_and_check(raw: bytes, fn: Callable[..., Any], args: tuple[Any, ...]
                    ) -> Checked | ApiError:
    """In the child: the body parsed, then checked."""
    body = parse_json(raw)
    if isinstance(body, ApiError):
        return body
    return Checked(body, fn(body, *args))


def _in_child(pool: ProcessPoolExecutor, raw: bytes, fn: Callable[..., Any],
              args: tuple[Any, ...]) -> Checked | ApiError:
    result: Checked | ApiError = pool.submit(parse_and_check, raw, fn, args).result()
    return result


class BodyParser:
    def __init__(self, workers: int = CHILD_PARSERS, threshold: int = CHILD_PARSE_BYTES) -> None:
        self.workers = workers
        self.threshold = threshold
        self.pool: ProcessPoolExecutor | None = None
        self._creating = threading.Lock()  # one pool, whichever thread asks first
        self.restarts = 0  # pools replaced after their child died
        # per tenant: its lock (a large body being read and parsed) and how many hold or
        # wait for it; a tenant with none has no entry
        self.turns: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def turn(self, tenant: str) -> AsyncIterator[None]:
        """Until the tenant's large bodies before this one are read and parsed."""
        lock, count = self.turns.setdefault(tenant, (asyncio.Lock(), [0]))
        count[0] += 1
        try:
            async with lock:
                yield
        finally:
            count[0] -= 1
            if not count[0]:
                del self.turns[tenant]

    def _pool(self) -> ProcessPoolExecutor:
        with self._creating:
            return self.pool if self.pool is not None else self._new_pool()

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn: a fresh interpreter (no fork of a process running threads and a loop)
        pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        try:
            _start_lowered(pool)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        self.pool = pool
        return pool

    async def start(self) -> None:
        """Start the child now (a spawned interpreter takes ~0.5 s), not on the first large
        body. The pool's locks are POSIX semaphores: without a writable ``/dev/shm`` admission
        cannot isolate large parses and refuses to start, saying why."""
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._pool)
        except PermissionError as exc:
            raise RuntimeError(
                "admission: cannot start the body-parser process (POSIX semaphores need a "
                f"writable /dev/shm, as every container runtime mounts it): {exc}") from exc

    async def parse(self, raw: bytes, check: Callable[[], BodyCheck] | None = None
                    ) -> Any | ApiError:
        """The body parsed, or its 400. With ``check`` (made only for a large body), a large
        body comes back as ``Checked``: parsed and checked in the child, on a thread of the
        check's ``slots`` waiting for it."""
        if len(raw) <= self.threshold:
            return parse_json(raw)
        loop = asyncio.get_running_loop()
        pool = self.pool
        if pool is None:  # not started, or its child died: a fresh one, off the loop
            pool = await loop.run_in_executor(None, self._pool)
        try:
            if check is None:
                return await loop.run_in_executor(pool, parse_json, raw)
            c = check()
            return await loop.run_in_executor(c.slots, _in_child, pool, raw, c.fn, c.args)
        except BrokenProcessPool:
            if self.pool is pool:  # the first request to see it replaces the pool
                self.pool = None
                self.restarts += 1
                pool.shutdown(wait=False, cancel_futures=True)
            log.error("admission.body_parser_died", size=len(raw), restarts=self.restarts)
            return errors.unavailable("the request body could not be parsed now (the parser "
                                      "process stopped); nothing was written, retry later")

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

"""Large request bodies are parsed in a child process. ``json`` holds the GIL for the whole
parse, so a thread would not free the event loop: an 8 MB body (the issue's twenty image bombs
in one request) held it ~35 ms, and a tenant sending such bodies back to back held it most of
the time — every other tenant's request waited behind the parses. A body over
``CHILD_PARSE_BYTES`` goes to a pool of ``CHILD_PARSERS`` processes (the same
``parse_json``, the same answers); the event loop only hands the bytes over and takes the
parsed value back. Smaller bodies are parsed in the event loop (a process hop costs more than
their parse)."""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from services.admission.core import lower_priority
from services.admission.domain.jsonbody import parse_json
from shared.domain.errors import ApiError

CHILD_PARSE_BYTES = 1 << 20  # 1 MiB: ~4 ms of parsing in the event loop at most
CHILD_PARSERS = 1  # one process: large bodies are parsed one at a time per replica


class BodyParser:
    def __init__(self, workers: int = CHILD_PARSERS, threshold: int = CHILD_PARSE_BYTES) -> None:
        self.workers = workers
        self.threshold = threshold
        self.pool: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        if self.pool is None:
            # spawn: a fresh interpreter (no fork of a process running threads and a loop)
            # at the image-check threads' lower priority (a large parse is a tenant's CPU too)
            self.pool = ProcessPoolExecutor(self.workers,
                                            mp_context=multiprocessing.get_context("spawn"),
                                            initializer=lower_priority)
        return self.pool

    async def start(self) -> None:
        """Start the child now (a spawned interpreter takes ~0.5 s), not on the first large
        body. The pool's locks are POSIX semaphores: without a writable ``/dev/shm`` admission
        cannot isolate large parses and refuses to start, saying why."""
        try:
            await self.parse(b"0" * (self.threshold + 1))
        except PermissionError as exc:
            raise RuntimeError(
                "admission: cannot start the body-parser process (POSIX semaphores need a "
                f"writable /dev/shm, as every container runtime mounts it): {exc}") from exc

    async def parse(self, raw: bytes) -> Any | ApiError:
        if len(raw) <= self.threshold:
            return parse_json(raw)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool(), parse_json, raw)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = None

"""The lower CPU priority of what a tenant's large or image-carrying request costs beyond the
event loop: the image-check threads (``core.ImageWorkers``) and the body parser's child and
helper threads (``parsing.BodyParser``)."""

from __future__ import annotations

import contextlib
import os
import threading

DECODE_NICE = 10  # added to the nice value of the image-check threads and the body parser


def lower_priority() -> None:
    """Lower the calling thread's CPU priority by ``DECODE_NICE`` (Linux: per thread; a
    process's only thread: the process). Lowering needs no privilege; where it is refused
    anyway, the thread runs as before."""
    with contextlib.suppress(OSError, AttributeError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + DECODE_NICE)

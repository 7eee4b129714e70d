"""Admission's decodes run below the event loop's CPU priority (services/admission/core.py,
``lower_priority``): the image-check threads and the body-parser process, each
``DECODE_NICE`` nicer than the thread that started them; the caller's own priority is left
as it was (on Linux the nice value is per thread)."""

from __future__ import annotations

import os
import threading

from services.admission.core import ImageWorkers
from services.admission.priority import DECODE_NICE, lower_priority


def nice_of_a_thread(run_first: bool) -> tuple[int, int]:
    got: dict[str, int] = {}

    def work() -> None:
        tid = threading.get_native_id()
        before = os.getpriority(os.PRIO_PROCESS, tid)
        if run_first:
            lower_priority()
        got["before"], got["after"] = before, os.getpriority(os.PRIO_PROCESS, tid)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    return got["before"], got["after"]


def test_lower_priority_lowers_the_calling_thread_only() -> None:
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    before, after = nice_of_a_thread(run_first=True)
    assert after == min(before + DECODE_NICE, 19)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


async def test_the_image_check_threads_run_nicer_than_the_loop() -> None:
    workers = ImageWorkers(1)
    try:
        loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        body = {"content": [{"image_url": "x"}]}  # carries an image: runs on the pool
        nice = await workers.run(
            body, lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        assert nice == min(loop_nice + DECODE_NICE, 19)
    finally:
        workers.close()

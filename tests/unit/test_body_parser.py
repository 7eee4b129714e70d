"""Bodies over 1 MiB are parsed in a child process (``services/admission/parsing.py``) with the
same ``parse_json`` and the same answers; smaller ones in the event loop, with no process."""

from __future__ import annotations

import json
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

from services.admission.domain.jsonbody import parse_json
from services.admission.domain.validation import Limits, validate_create
from services.admission.parsing import CHILD_PARSE_BYTES, BodyCheck, BodyParser, Checked
from services.admission.priority import DECODE_NICE
from shared.domain.errors import ApiError
from tests.support.builders import data_uri, png_bytes, png_with_header

PAD = "x" * CHILD_PARSE_BYTES


async def test_a_large_body_is_parsed_in_a_child_process_with_the_same_answers() -> None:
    parser = BodyParser()
    try:
        cases = [
            f'{{"input": "{PAD}", "metadata": {{"k": [1, 2.5, null, true]}}}}'.encode(),
            f'{{"input": "{PAD}", "a": 1, "a": 2}}'.encode(),  # duplicate key: 400
            f'{{"input": "{PAD}", "metadata": {{"\\udfff": 1}}}}'.encode(),  # surrogate key
            f'{{"input": "{PAD}", "n": 1e999}}'.encode(),
            b"[" * 100_000 + PAD.encode(),  # nested too deeply / malformed
        ]
        for raw in cases:
            assert len(raw) > CHILD_PARSE_BYTES
            assert await parser.parse(raw) == parse_json(raw)
        assert parser.pool is not None
        pids = set(parser.pool._processes)  # the child that parsed them
        assert pids and os.getpid() not in pids
    finally:
        parser.close()


async def test_a_small_body_is_parsed_in_the_event_loop() -> None:
    parser = BodyParser()
    assert await parser.parse(b'{"input": "hi"}') == {"input": "hi"}
    assert parser.pool is None


def _nice(native_id: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, native_id)


async def test_the_child_and_the_pools_helper_threads_run_at_the_lower_priority() -> None:
    """What a large parse costs runs below the event loop: the child, and in this process the
    thread that writes the body into the child's pipe and the one that reads the value back."""
    base = _nice(threading.get_native_id())
    parser = BodyParser()
    try:
        await parser.start()
        assert await parser.parse(f'{{"input": "{PAD}"}}'.encode()) == {"input": PAD}
        pool = parser.pool
        assert pool is not None
        manager = pool._executor_manager_thread  # reads the parsed values back
        feeder = pool._call_queue._thread  # writes the bodies into the child's pipe
        assert manager is not None and manager.native_id is not None
        assert feeder is not None and feeder.native_id is not None
        assert _nice(manager.native_id) == base + DECODE_NICE
        assert _nice(feeder.native_id) == base + DECODE_NICE
        for pid in pool._processes:
            assert os.getpriority(os.PRIO_PROCESS, pid) == base + DECODE_NICE
        assert _nice(threading.get_native_id()) == base  # the event loop's thread unchanged
    finally:
        parser.close()


async def test_a_dead_child_answers_503_once_and_the_next_large_body_gets_a_new_one() -> None:
    parser = BodyParser()
    raw = f'{{"input": "{PAD}"}}'.encode()
    try:
        await parser.start()
        assert parser.pool is not None
        (pid,) = parser.pool._processes
        os.kill(pid, signal.SIGKILL)
        got = await parser.parse(raw)
        assert isinstance(got, ApiError) and got.type == "unavailable" and got.status == 503
        assert parser.restarts == 1
        assert await parser.parse(raw) == {"input": PAD}
        assert parser.pool is not None
        (new_pid,) = parser.pool._processes
        assert new_pid != pid
    finally:
        parser.close()


def _where(body: object) -> int:
    """A check that says which process ran it."""
    return os.getpid()


async def test_a_large_create_body_is_validated_in_the_child_with_the_in_process_verdict(
) -> None:
    """``BodyCheck``: a large body's ``validate_create`` runs in the child after the parse;
    the verdict that comes back is the one the event loop's process would have reached —
    admitted, refused by the content model, or an image refused from its header (a bomb)."""
    parser = BodyParser()
    slots = ThreadPoolExecutor(1)
    limits = Limits()
    check = BodyCheck(validate_create, (limits,), slots)
    bomb = data_uri(png_with_header(6324, 6324))
    image = data_uri(png_bytes(64, 64, noise=True))
    def with_image(url: str) -> dict[str, object]:
        return {"harness": "codex", "placement": "none", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": PAD}, {"type": "input_image", "image_url": url}]}]}

    cases = [
        {"harness": "codex", "placement": "none", "input": PAD},
        with_image(image),
        with_image(bomb),
        {"harness": "nobody", "placement": "none", "input": PAD},
        {"harness": "codex", "placement": "none", "input": PAD, "metadata": 7},
    ]
    try:
        for body in cases:
            raw = json.dumps(body).encode()
            assert len(raw) > CHILD_PARSE_BYTES
            got = await parser.parse(raw, lambda: check)
            assert isinstance(got, Checked) and got.body == body
            assert got.verdict == validate_create(body, limits)
        verdicts = [type((await parser.parse(json.dumps(b).encode(), lambda: check)).verdict)
                    for b in cases]
        assert verdicts.count(ApiError) == 3  # a bomb, a harness, a metadata refused
        bad = f'{{"input": "{PAD}", "a": 1, "a": 2}}'.encode()
        assert await parser.parse(bad, lambda: check) == parse_json(bad)  # the parse's own 400
        got = await parser.parse(raw, lambda: BodyCheck(_where, (), slots))
        assert isinstance(got, Checked) and got.verdict != os.getpid()
        assert parser.pool is not None and got.verdict in parser.pool._processes
    finally:
        parser.close()
        slots.shutdown()


async def test_a_small_body_is_not_checked_in_the_child() -> None:
    parser = BodyParser()
    slots = ThreadPoolExecutor(1)
    try:
        made = []
        assert await parser.parse(b'{"input": "hi"}', lambda: made.append(1) or BodyCheck(
            _where, (), slots)) == {"input": "hi"}
        assert parser.pool is None and not made
        assert parser.pool is None
    finally:
        slots.shutdown()

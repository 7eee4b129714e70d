"""Bodies over 1 MiB are parsed in a child process (``services/admission/parsing.py``) with the
same ``parse_json`` and the same answers; smaller ones in the event loop, with no process."""

from __future__ import annotations

import os

from services.admission.domain.jsonbody import parse_json
from services.admission.parsing import CHILD_PARSE_BYTES, BodyParser

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

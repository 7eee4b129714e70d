"""The scripted model server's request log file (``--log``): every recorded request is a JSON
line, written before the answer is played, so it outlives a killed server (the chaos suite
counts results applied twice from it)."""

from __future__ import annotations

import json
from pathlib import Path

from scripted_model.script import Scripts


def test_every_request_is_appended_to_the_log_before_its_answer(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    scripts = Scripts(str(log))
    scripts.register("K1", [[{"text": "a"}], [{"text": "b"}]])
    body = {"input": [{"type": "message", "content": "K1 hello"}]}
    assert scripts.take("responses", "/v1/responses", json.dumps(body), body) == [{"text": "a"}]
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(r["script_key"], r["body"]) for r in lines] == [("K1", body)]
    # a second server on the same file (a restart) appends
    Scripts(str(log)).take("responses", "/v1/responses", "{}", {})
    assert len(log.read_text().splitlines()) == 2
    assert Scripts().take("responses", "/v1/responses", "{}", {}) == [{"text": "ok"}]  # no log

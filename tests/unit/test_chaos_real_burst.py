"""The real-harness chaos rows' burst (``chaosreal.RealLoad.burst_now``): its messages go only to
the burst Sessions — never to a Session that runs the call rounds, where a message handed over
again after the fault would be a steer the round's script does not expect — each carries its
Session's burst key (so the model server plays that Session's script), and each is sent once,
with an id of its own, beside the others."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from tests.support.chaosreal import ModelProcess, RealLoad


async def test_a_burst_goes_to_the_burst_sessions_only(tmp_path: Path) -> None:
    seen: list[tuple[str, dict[str, object]]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, json.loads(request.content)))
        return httpx.Response(202, json={"status": "queued"})

    load = RealLoad("http://core", "key", "t", ModelProcess(tmp_path), sessions=2,
                    phase="turn", burst_sessions=2)
    assert [r.index for r in load.round_runs] == [0, 1]
    assert [r.index for r in load.burst_runs] == [2, 3]
    assert {r.harness for r in load.burst_runs} == {"codex", "claude_code"}
    for r in load.runs:
        r.session_id = f"sess{r.index}"
    async with httpx.AsyncClient(base_url="http://core",
                                 transport=httpx.MockTransport(answer)) as http:
        load.http = http
        assert load.burst_now(5) == 10
        for task in load.bursts:
            await task
    assert sorted({path for path, _ in seen}) == ["/v1/sessions/sess2/events",
                                                  "/v1/sessions/sess3/events"]
    for path, body in seen:
        run = load.runs[int(path.split("/")[3].removeprefix("sess"))]
        text = body["input"][0]["content"][0]["text"]  # type: ignore[index]
        assert text.startswith(load.burst_key(run)), text
    assert len({b["client_event_id"] for _, b in seen}) == 10
    assert [len(r.inputs) for r in load.runs] == [0, 0, 5, 5]
    assert all(i.concurrent and i.acked for r in load.burst_runs for i in r.inputs)

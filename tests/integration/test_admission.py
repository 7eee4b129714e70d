"""Admission over the real stack: a rejected request gets its exact answer and writes
nothing — no document in the store, no record on ``session.admitted`` — and the same request over
HTTP and over ``session.input`` gets the same answer."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from shared import records
from shared.kafka import decode
from tests.support.builders import png_data_uri
from tests.support.kafka import InputClient, open_call_by_fact, read_topic, store_counts
from tests.support.system import System, SystemFactory

pytestmark = pytest.mark.integration

Json = dict[str, Any]
MAX_BODY = 256 * 1024  # small, so the over-size row stays small
CALL_ID = "toolu_open_1"


# ---- helpers ---------------------------------------------------------------------------------


@dataclass
class Core:
    system: System
    kafka: InputClient
    claude_sid: str
    codex_sid: str


@pytest.fixture
async def core(make_system: SystemFactory) -> AsyncIterator[Core]:
    """Admission and storage only (no dispatcher: Turns stay as the test leaves them)."""
    system = await make_system(services=("storage", "admission"), http_port=0,
                               max_body_bytes=MAX_BODY)
    kafka = await InputClient(system.settings).start()
    try:
        r = await system.create("claude_code", "set-up session")
        assert r.status_code == 201, r.text
        claude_sid = r.json()["id"]
        await open_call_by_fact(system, claude_sid, CALL_ID)
        r = await system.create("codex", "set-up session")
        assert r.status_code == 201, r.text
        yield Core(system, kafka, claude_sid, r.json()["id"])
    finally:
        await kafka.stop()


# ---- the rejected sample -----------------------------------------------------------------------

PNG = png_data_uri()
B64 = PNG.split(",", 1)[1]


def _msg(*parts: Json) -> list[Json]:
    return [{"role": "user", "content": list(parts)}]


def _text(marker: str) -> Json:
    return {"type": "input_text", "text": f"marker {marker}"}


def _img(url: str) -> Json:
    return {"type": "input_image", "image_url": url}


@dataclass(frozen=True)
class Row:
    name: str
    target: str  # "create" | "claude" | "codex" (the event's Session)
    status: int
    type: str
    param: str | None


def body_for(row: Row, m: str) -> Json:
    """The request body of each row; ``m`` is a unique marker that must never be admitted."""
    meta = {"marker": m}
    if row.name == "string event input":
        return {"type": records.EV_MESSAGE, "input": f"marker {m}", "metadata": meta}
    if row.name == "empty content":
        return {"harness": "codex", "placement": "none", "metadata": meta,
                "input": [{"role": "user", "content": []}]}
    if row.name == "whitespace-only for claude_code":
        return {"harness": "claude_code", "placement": "none", "metadata": meta,
                "input": _msg({"type": "input_text", "text": " \u3000\n\u2028\ufeff"},
                              {"type": "input_text", "text": ""})}
    if row.name == "image for minimax_code":
        return {"harness": "minimax_code", "placement": "none", "metadata": meta,
                "input": _msg(_text(m), _img(PNG))}
    if row.name == "non-canonical base64 (line break)":
        return {"harness": "codex", "placement": "none", "metadata": meta,
                "input": _msg(_text(m), _img(f"data:image/png;base64,{B64[:40]}\n{B64[40:]}"))}
    if row.name == "non-canonical base64 (padding dropped)":
        return {"harness": "codex", "placement": "none", "metadata": meta,
                "input": _msg(_text(m), _img(PNG.rstrip("=")))}
    if row.name == "remote URL":
        return {"harness": "codex", "placement": "none", "metadata": meta,
                "input": _msg(_text(m), _img("https://example.com/cat.png"))}
    if row.name == "unknown field in a message":
        return {"harness": "codex", "placement": "none", "metadata": meta,
                "input": [{"role": "user", "content": [_text(m)], "name": "bob"}]}
    if row.name == "tool result for an unknown call":
        return {"type": records.EV_TOOL_RESULT, "call_id": "toolu_never_issued",
                "success": True, "output": f"marker {m}", "metadata": meta}
    if row.name == "image in a failed result (claude_code)":
        return {"type": records.EV_TOOL_RESULT, "call_id": CALL_ID, "success": False,
                "output": [_text(m), _img(PNG)], "error": "it failed", "metadata": meta}
    if row.name == "over-size body":
        return {"harness": "codex", "placement": "none", "metadata": meta,
                "input": f"marker {m} " + "x" * MAX_BODY}
    raise AssertionError(row.name)


ROWS = [
    Row("string event input", "codex", 400, "invalid_request", "input"),
    Row("empty content", "create", 400, "invalid_request", "input[0].content"),
    Row("whitespace-only for claude_code", "create", 400,
        "unsupported_or_invalid_configuration", "input[0].content"),
    Row("image for minimax_code", "create", 400, "unsupported_or_invalid_configuration",
        "input[0].content[1]"),
    Row("non-canonical base64 (line break)", "create", 400, "invalid_request",
        "input[0].content[1].image_url"),
    Row("non-canonical base64 (padding dropped)", "create", 400, "invalid_request",
        "input[0].content[1].image_url"),
    Row("remote URL", "create", 400, "invalid_request", "input[0].content[1].image_url"),
    Row("unknown field in a message", "create", 400, "invalid_request", "input[0].name"),
    Row("tool result for an unknown call", "claude", 404, "not_found", "call_id"),
    Row("image in a failed result (claude_code)", "claude", 400,
        "unsupported_or_invalid_configuration", "output[1]"),
    Row("over-size body", "create", 413, "request_too_large", None),
]


def _target(core: Core, row: Row) -> tuple[str, str, str | None]:
    """(HTTP path, session.input op, session_id)."""
    if row.target == "create":
        return "/v1/sessions", records.OP_CREATE, None
    sid = core.claude_sid if row.target == "claude" else core.codex_sid
    return f"/v1/sessions/{sid}/events", records.OP_EVENT, sid


async def test_rejected_requests_answer_exactly_and_write_nothing(core: Core) -> None:
    http = core.system.http
    assert http is not None
    before = await store_counts(core.system.settings)
    markers: dict[str, str] = {}
    for row in ROWS:
        m = markers[row.name] = uuid.uuid4().hex
        path, op, sid = _target(core, row)
        body = body_for(row, m)
        r = await http.post(path, content=json.dumps(body).encode(),
                            headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["error"]["type"], r.json()["error"]["param"]) == (
            row.status, row.type, row.param), (row.name, r.text)
        answer = await core.kafka.ask(op, body, sid)
        assert (answer["status"], answer["body"]) == (r.status_code, r.json()), row.name

    # malformed JSON: HTTP answers 400 with the exact error; over session.input the record
    # cannot carry a request_id, so it goes to the DLQ with its reason (and is not admitted):
    # the reason code ``undecodable`` and the parser's detail (docs/reliability.md).
    m = markers["malformed JSON"] = uuid.uuid4().hex
    raw = b'{"harness": "codex", "placement": "none", "input": "marker ' + m.encode() + b'",'
    r = await http.post("/v1/sessions", content=raw,
                        headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request"
    assert r.json()["error"]["param"] is None
    await core.kafka.producer.send_and_wait(core.system.topics.session_input, raw, key=b"x")
    dlq_topic = core.system.topics.dlq(core.system.topics.session_input)
    for _ in range(100):
        dlq = [decode(v) for v in await read_topic(core.system.settings, dlq_topic)]
        if any(m in d["value"] for d in dlq):
            break
        await asyncio.sleep(0.1)
    assert any(m in d["value"] and d["reason"] == "undecodable"
               and d["detail"].startswith("malformed JSON") for d in dlq), dlq

    # the call the rejected result named is still open
    r = await http.get(f"/v1/sessions/{core.claude_sid}/tool_results/{CALL_ID}")
    assert r.status_code == 200, r.text
    assert (r.json()["submitted"], r.json()["state"], r.json()["submission"]) == (
        False, "open", None)

    # Nothing written: no new document, no admitted record carrying any marker.
    assert await store_counts(core.system.settings) == before
    admitted = await read_topic(core.system.settings, core.system.topics.session_admitted)
    assert len(admitted) == 2  # the two set-up Sessions
    for name, mk in markers.items():
        assert not any(mk.encode() in v for v in admitted), name
    stored = await read_topic(core.system.settings, core.system.topics.session_stored)
    for name, mk in markers.items():
        assert not any(mk.encode() in v for v in stored), name


def _shape(value: Any) -> Any:
    """The structure of an answer with its minted ids and times blanked out."""
    if isinstance(value, dict):
        return {k: ("<id>" if k in ("id", "event_id", "turn_id", "session_id")
                    else "<time>" if k == "created_at" else _shape(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


async def test_accepted_requests_get_the_same_answer_over_http_and_kafka(core: Core) -> None:
    http = core.system.http
    assert http is not None
    create = {"harness": "codex", "placement": "none", "metadata": {"k": [1, "2"]},
              "input": [{"role": "user", "type": "message", "content": [
                  {"type": "input_text", "text": ""}, {"type": "input_text", "text": "hé 𝄞"},
                  _img(PNG)]}]}
    r = await http.post("/v1/sessions", json=create)
    k = await core.kafka.ask(records.OP_CREATE, create)
    assert r.status_code == k["status"] == 201, (r.text, k)
    assert _shape(r.json()) == _shape(k["body"])
    assert r.json()["id"] != k["body"]["id"]
    assert r.json()["items"][0]["content"] == create["input"][0]["content"]  # type: ignore[index]

    # an event to each of the two Sessions: steered (the Turn the creation started is running)
    event = {"type": records.EV_MESSAGE, "input": _msg({"type": "input_text", "text": "more"})}
    r2 = await http.post(f"/v1/sessions/{r.json()['id']}/events", json=event)
    k2 = await core.kafka.ask(records.OP_EVENT, event, k["body"]["id"])
    assert r2.status_code == k2["status"] == 202, (r2.text, k2)
    assert r2.json()["delivery"] == k2["body"]["delivery"] == "steered"
    assert _shape(r2.json()) == _shape(k2["body"])
    assert [i["sequence"] for i in r2.json()["items"]] == [3]
    assert [i["sequence"] for i in k2["body"]["items"]] == [3]

    # an event for a Session that does not exist: the same 404 either way
    missing = f"session_{uuid.uuid4().hex}"
    r3 = await http.post(f"/v1/sessions/{missing}/events", json=event)
    k3 = await core.kafka.ask(records.OP_EVENT, event, missing)
    assert r3.status_code == k3["status"] == 404
    assert r3.json() == k3["body"]

"""``?wait=true&timeout_ms=N`` and metadata / tags / external_actor over the real stack
with the reference Runtime: waits that complete (200) and expire (202), a client disconnect that
frees its slot, the 429 at the bound, a repeated idempotency id joining the same Turn, and the
envelope fields echoed on the Items of the input (HTTP and ``session.items``)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.builders import msg, text
from tests.support.processes import ONE_WAIT, Core
from tests.support.public import (
    API_KEY,
    MESSAGE,
    TOOL_RESULT,
    create,
    event,
    stored_items,
    wait_item,
)
from tests.support.system import ItemCollector

pytestmark = pytest.mark.e2e

LONG = {"wait": "true", "timeout_ms": "60000"}
ACTOR = {"source": "slack", "actor_id": "U0123456789", "actor_name": "Alice",
         "metadata": {"team_id": "T1", "n": 12345678901234567890 // 10}}
META = {"thread_ts": "1715000000.123456", "z": [1, {"b": None}], "a": "é\u2028"}
TAGS = ["bug-report", "from-slack"]


def seqs(items: list[dict[str, Any]]) -> list[int]:
    return [int(it["sequence"]) for it in items]


def kinds(items: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    return [(it["type"], it.get("state")) for it in items]


async def create_waiting(api: httpx.AsyncClient, input: Any, status: int = 200,
                         params: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    r = await api.post("/v1/sessions", params=params or LONG,
                       json={"harness": "claude_code", "placement": "none", "input": input,
                             **extra})
    assert r.status_code == status, r.text
    return dict(r.json())


# ---- completes / expires -------------------------------------------------------------------


async def test_wait_on_creation_completes_with_the_turns_items(
        api: httpx.AsyncClient, items: ItemCollector) -> None:
    body = await create_waiting(api, "hello, wait for me")
    got = body["items"]
    # the input, the Turn, what the agent said (the reference Runtime's echo: its answer), the end
    assert kinds(got) == [("message", None), ("turn", "started"), ("message", None),
                          ("turn", "completed")]
    assert got[2]["role"] == "agent" and got[2]["phase"] == "final_answer"
    assert got[2]["content"] == [{"type": "output_text", "text": "echo: hello, wait for me"}]
    assert seqs(got) == sorted(seqs(got)) and len({it["turn_id"] for it in got}) == 1
    assert body["id"].startswith("session_") and body["harness"] == "claude_code"
    assert got == await stored_items(api, body["id"])  # exactly what was stored, in order


async def test_wait_on_an_event_completes(api: httpx.AsyncClient, items: ItemCollector) -> None:
    s = await create(api, "codex", "first")
    await wait_item(items, s["id"], type="turn", state="completed")
    body = await event(api, s["id"], {"type": MESSAGE, "input": [msg(text("second"))]}, 200,
                       **LONG)
    assert body["delivery"] == "started"
    assert kinds(body["items"]) == [("message", None), ("turn", "started"),
                                    ("message", None), ("turn", "completed")]
    assert body["items"][2]["role"] == "agent"  # the Turn's answer
    assert seqs(body["items"]) == [5, 6, 7, 8]  # after the first Turn's 1, 2, 3 (its answer), 4


async def test_wait_expires_with_partial_items_and_the_turn_goes_on(
        api: httpx.AsyncClient, items: ItemCollector) -> None:
    # The Turn calls a function and stays open until its result: the budget runs out first.
    body = await create_waiting(api, 'please call lookup {"q": 1}', 202,
                                {"wait": "true", "timeout_ms": "3000"})
    sid = body["id"]
    got = body["items"]
    assert kinds(got)[:2] == [("message", None), ("turn", "started")]
    assert ("turn", "completed") not in kinds(got)
    call = await wait_item(items, sid, type="function_call")
    # The result's wait covers the rest of the Turn and the result's application.
    res = await event(api, sid, {"type": TOOL_RESULT, "call_id": call["call_id"],
                                 "success": True, "output": "42"}, 200, **LONG)
    assert res["delivery"] == "resumed"
    rk = kinds(res["items"])
    assert rk[0] == ("function_call_output", None)
    assert ("turn", "completed") in rk and ("function_call_application", "applied") in rk
    assert seqs(res["items"]) == sorted(seqs(res["items"]))
    # the Turn's later Items reached session.items too
    end = await wait_item(items, sid, type="turn", state="completed")
    assert end["turn_id"] == got[0]["turn_id"]


async def test_timeout_ms_out_of_range_is_400_and_writes_nothing(api: httpx.AsyncClient,
                                                                items: ItemCollector) -> None:
    s = await create(api, "codex", "x")
    # the first Turn ends on its own: read last_sequence once it has, so nothing else moves it
    await wait_item(items, s["id"], type="turn", state="completed")
    before = (await api.get(f"/v1/sessions/{s['id']}")).json()["last_sequence"]
    for bad in ("0", "abc", "-1", "1.5", "+5"):
        r = await api.post(f"/v1/sessions/{s['id']}/events",
                           params={"wait": "true", "timeout_ms": bad},
                           json={"type": MESSAGE, "input": [msg(text("no"))]})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "invalid_request"
        assert r.json()["error"]["param"] == "timeout_ms"
    # A create-with-wait refused for its budget writes nothing: no Session, no Item, and its
    # client_request_id stays unused (a later create with it is new, not a replay).
    crid, marker = str(uuid.uuid4()), f"refused create {uuid.uuid4().hex}"
    body = {"harness": "codex", "placement": "none", "input": marker, "client_request_id": crid}
    sessions_before = set(items.by_session)
    r = await api.post("/v1/sessions", params={"wait": "true", "timeout_ms": "0"}, json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "timeout_ms"
    assert "id" not in r.json()
    await asyncio.sleep(1.5)
    assert (await api.get(f"/v1/sessions/{s['id']}")).json()["last_sequence"] == before
    assert not [it for sid in set(items.by_session) - sessions_before
                for it in items.by_session[sid]
                if any(p.get("text") == marker for p in it.get("content") or [])]
    fresh = await api.post("/v1/sessions", json=body)
    assert fresh.status_code == 201 and "idempotent-replayed" not in fresh.headers
    made = await wait_item(items, fresh.json()["id"], type="message")
    assert made["content"] == [text(marker)]
    assert [sid for sid in set(items.by_session) - sessions_before
            if any(any(p.get("text") == marker for p in it.get("content") or [])
                   for it in items.by_session[sid])] == [fresh.json()["id"]]


async def test_timeout_ms_above_the_cap_is_clamped_not_refused(api: httpx.AsyncClient) -> None:
    """CONTRACT §1 / seed 004: timeout_ms is "capped at 600000" — a larger budget is clamped to
    600000 (the unit test in tests/unit/test_wait_http.py sees the 600 s budget), so the wait is
    answered like any other: 200 when the Turn ends."""
    for raw in ("600001", "9" * 30):
        body = await create_waiting(api, "clamped budget", params={"wait": "true",
                                                                   "timeout_ms": raw})
        assert kinds(body["items"])[-1] == ("turn", "completed")
        s = await create(api, "codex", "x")
        r = await api.post(f"/v1/sessions/{s['id']}/events",
                           params={"wait": "true", "timeout_ms": raw},
                           json={"type": MESSAGE, "input": [msg(text("clamped"))]})
        assert r.status_code == 200, r.text
        assert kinds(r.json()["items"])[-1] == ("turn", "completed")


# ---- idempotency under wait ----------------------------------------------------------------


async def test_repeated_client_event_id_under_wait_joins_the_same_turn(
        api: httpx.AsyncClient, items: ItemCollector) -> None:
    s = await create(api, "claude_code", "start")
    await wait_item(items, s["id"], type="turn", state="completed")
    ceid = str(uuid.uuid4())
    body = {"type": MESSAGE, "input": [msg(text("again"))], "client_event_id": ceid,
            "metadata": {"k": 1}}
    # a 1 ms budget: answered with the Items so far while the Turn runs
    first = await event(api, s["id"], body, 202, wait="true", timeout_ms="1")
    assert first["delivery"] == "started"
    again = await event(api, s["id"], body, 200, **LONG)
    assert again["delivery"] == "duplicate" and again["event_id"] == first["event_id"]
    assert again["items"][: len(first["items"])] == first["items"]
    assert kinds(again["items"])[-1] == ("turn", "completed")
    assert {it["turn_id"] for it in again["items"]} == {first["items"][0]["turn_id"]}
    third = await event(api, s["id"], body, 200, **LONG)  # the Turn is over: answered at once
    assert third["items"] == again["items"]
    # the same id with different metadata is a different request: 409
    r = await api.post(f"/v1/sessions/{s['id']}/events", params=LONG,
                       json={**body, "metadata": {"k": 2}})
    assert r.status_code == 409 and r.json()["error"]["param"] == "client_event_id"


async def test_repeated_client_request_id_under_wait(api: httpx.AsyncClient) -> None:
    crid = str(uuid.uuid4())
    first = await create_waiting(api, "once", client_request_id=crid)
    again = await create_waiting(api, "once", client_request_id=crid)
    assert again["id"] == first["id"] and again["items"] == first["items"]


# ---- bounds: 429, disconnect ---------------------------------------------------------------


@pytest.fixture(scope="module")
async def bounded(core: Core) -> AsyncIterator[httpx.AsyncClient]:
    """A second admission replica allowing one wait (per replica and per tenant)."""
    name = "admission-bounded"
    # in a thread: the session's Item collector goes on reading meanwhile
    url = await asyncio.to_thread(core.admission_replica, name, ONE_WAIT)
    METRICS[url] = core.metrics_urls[name]  # /metrics: the replica's metrics port
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60,
                                     headers={"Authorization": f"Bearer {API_KEY}"}) as c:
            yield c
    finally:
        core.stop(name)


METRICS: dict[str, str] = {}  # an admission replica's URL → its /metrics URL


async def waits_active(c: httpx.AsyncClient) -> float:
    async with httpx.AsyncClient(timeout=30) as raw:
        text = (await raw.get(METRICS[str(c.base_url).rstrip("/")])).text
    for line in text.splitlines():
        if line.startswith("session_core_waits_active "):
            return float(line.split()[1])
    return 0.0


async def until_waits_active(c: httpx.AsyncClient, n: float, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while await waits_active(c) != n:
        assert time.monotonic() < deadline, f"waits_active did not reach {n}"
        await asyncio.sleep(0.1)


async def open_call_turn(c: httpx.AsyncClient, items: ItemCollector) -> tuple[str, str]:
    """A Session whose Turn waits for a function result (it does not end on its own)."""
    r = await c.post("/v1/sessions", json={"harness": "claude_code", "placement": "none",
                                           "input": 'please call wait_here {"x": 1}'})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    call = await wait_item(items, sid, type="function_call")
    return sid, str(call["call_id"])


async def test_429_at_the_bound_writes_nothing(bounded: httpx.AsyncClient,
                                               items: ItemCollector) -> None:
    sid, call_id = await open_call_turn(bounded, items)
    holder = asyncio.create_task(bounded.post(
        f"/v1/sessions/{sid}/events", params=LONG,
        json={"type": MESSAGE, "input": [msg(text("steer and wait"))]}))
    await until_waits_active(bounded, 1)
    last = (await bounded.get(f"/v1/sessions/{sid}")).json()["last_sequence"]
    ceid, crid = str(uuid.uuid4()), str(uuid.uuid4())
    refused = await bounded.post(f"/v1/sessions/{sid}/events", params=LONG,
                                 json={"type": MESSAGE, "input": [msg(text("refused"))],
                                       "client_event_id": ceid})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"]["type"] == "rate_limited"
    assert int(refused.headers["retry-after"]) >= 1
    refused_create = await bounded.post(
        "/v1/sessions", params=LONG,
        json={"harness": "codex", "placement": "none", "input": "x", "client_request_id": crid})
    assert refused_create.status_code == 429
    # the waiting request ends when its Turn does: give the call its result
    done = await bounded.post(f"/v1/sessions/{sid}/events",
                              json={"type": TOOL_RESULT, "call_id": call_id, "success": True,
                                    "output": "ok"})
    assert done.status_code == 202, done.text
    held = await asyncio.wait_for(holder, 60)
    assert held.status_code == 200, held.text
    # nothing was written for the refused requests: their ids are unused
    seqs_after = [it["sequence"] for it in await stored_items(bounded, sid)]
    assert seqs_after == list(range(1, len(seqs_after) + 1)) and last < len(seqs_after)
    texts = [p.get("text") for it in await stored_items(bounded, sid)
             for p in it.get("content", [])]
    assert "refused" not in texts
    r = await bounded.post(f"/v1/sessions/{sid}/events",
                           json={"type": MESSAGE, "input": [msg(text("refused"))],
                                 "client_event_id": ceid})
    assert r.status_code == 202 and r.json()["delivery"] != "duplicate"
    r = await bounded.post("/v1/sessions", json={"harness": "codex", "placement": "none",
                                                 "input": "x", "client_request_id": crid})
    assert r.status_code == 201 and "idempotent-replayed" not in r.headers


async def test_client_disconnect_frees_the_slot(core: Core, bounded: httpx.AsyncClient,
                                                items: ItemCollector) -> None:
    sid, call_id = await open_call_turn(bounded, items)
    await until_waits_active(bounded, 0)
    # the first waiter: its own connection, closed while it waits
    leaving = httpx.AsyncClient(base_url=str(bounded.base_url), timeout=60,
                                headers={"Authorization": f"Bearer {API_KEY}"})
    task = asyncio.create_task(leaving.post(
        f"/v1/sessions/{sid}/events", params={"wait": "true", "timeout_ms": "600000"},
        json={"type": MESSAGE, "input": [msg(text("leaving"))]}))
    await until_waits_active(bounded, 1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await leaving.aclose()
    # the slot is free long before the 600 s budget (generous bound for a loaded machine)
    await until_waits_active(bounded, 0, timeout=20)
    second = await bounded.post(f"/v1/sessions/{sid}/events",
                                params={"wait": "true", "timeout_ms": "2000"},
                                json={"type": MESSAGE, "input": [msg(text("second"))]})
    assert second.status_code == 202, second.text  # accepted (the Turn still waits): not 429
    r = await bounded.post(f"/v1/sessions/{sid}/events",
                           json={"type": TOOL_RESULT, "call_id": call_id, "success": True})
    assert r.status_code == 202


# ---- metadata, tags, external_actor ------------------------------------------------------


async def test_envelope_round_trip_on_items(api: httpx.AsyncClient, items: ItemCollector
                                            ) -> None:
    env = {"metadata": META, "tags": TAGS, "external_actor": ACTOR}
    body = await create_waiting(api, 'please call fetch {"id": 7}', 202,
                                {"wait": "true", "timeout_ms": "2000"}, **env)
    sid = body["id"]
    first = body["items"][0]
    assert first["type"] == "message"
    for k, v in env.items():
        assert first[k] == v
    assert body["metadata"] == META
    assert "metadata" not in body["items"][1]  # only the Items of the input carry them
    call = await wait_item(items, sid, type="function_call")
    env2 = {"metadata": {"step": 2}, "tags": ["tool"],
            "external_actor": {"source": "ci", "actor_id": "bot-1"}}
    res = await event(api, sid, {"type": TOOL_RESULT, "call_id": call["call_id"],
                                 "success": True, "output": "ok", **env2}, 200, **LONG)
    out = res["items"][0]
    assert out["type"] == "function_call_output"
    for k, v in env2.items():
        assert out[k] == v
    app = next(it for it in res["items"] if it["type"] == "function_call_application")
    assert "metadata" not in app
    env3 = {"metadata": {"m": [1, 2]}, "tags": [], "external_actor": ACTOR}
    m = await event(api, sid, {"type": MESSAGE, "input": [msg(text("a")), msg(text("b"))],
                               **env3})
    assert [it["metadata"] for it in m["items"] if it["type"] == "message"] == [{"m": [1, 2]}] * 2
    # the same on session.items and on GET …/items
    on_topic = await wait_item(items, sid, type="message", sequence=first["sequence"])
    on_topic_out = await wait_item(items, sid, type="function_call_output")
    stored = {it["sequence"]: it for it in await stored_items(api, sid)}
    for k, v in env.items():
        assert on_topic[k] == v and stored[first["sequence"]][k] == v
    for k, v in env2.items():
        assert on_topic_out[k] == v and stored[out["sequence"]][k] == v


async def test_envelope_validation_over_http(api: httpx.AsyncClient) -> None:
    r = await api.post("/v1/sessions", json={"harness": "codex", "placement": "none",
                                             "input": "x", "tags": ["t" * 65]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tags[0]"
    r = await api.post("/v1/sessions", params=LONG,
                       json={"harness": "codex", "placement": "none", "input": "x",
                             "external_actor": {"source": "slack", "actor_id": "U",
                                                "team": "T"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "external_actor.team"

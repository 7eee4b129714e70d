"""``session_core_client`` pure parts: Retry-After, the retry policy, SSE parsing, bodies."""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import uuid

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_core_client import (
    ApiError,
    AsyncClient,
    Client,
    RetryPolicy,
    TransportError,
    image_part,
)
from session_core_client.core import (
    ItemFollow,
    SseParser,
    create_body,
    message_body,
    retry_after_s,
    tool_result_body,
    wait_params,
)


def test_retry_after_seconds_and_http_date() -> None:
    assert retry_after_s({"Retry-After": "3"}) == 3.0
    when = email.utils.formatdate(1_000_010, usegmt=True)
    assert retry_after_s({"retry-after": when}, now=1_000_000) == pytest.approx(10.0)
    assert retry_after_s({"retry-after": when}, now=2_000_000) == 0.0
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None


def test_retry_policy_honours_retry_after_and_backs_off() -> None:
    p = RetryPolicy(backoff_s=0.5, max_backoff_s=4, jitter=0, rng=random.Random(1))
    assert p.delay(0, 2.0) == 2.0
    assert p.delay(0, 1e9) == p.max_retry_after_s
    assert [p.delay(n, None) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]


def _client(handler: httpx.MockTransport, attempts: int = 4) -> tuple[Client, list[float]]:
    sleeps: list[float] = []
    return Client("http://core.test", "k", transport=handler, sleep=sleeps.append,
                  retry=RetryPolicy(attempts=attempts, jitter=0)), sleeps


def test_429_then_success_sends_the_same_body_after_retry_after() -> None:
    bodies: list[bytes] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        if len(bodies) == 1:
            return httpx.Response(429, headers={"Retry-After": "2"},
                                  json={"error": {"type": "rate_limited", "message": "later",
                                                  "param": None}})
        return httpx.Response(201, json={"id": "session_" + "a" * 32, "items": []})

    client, sleeps = _client(httpx.MockTransport(answer))
    created = client.create_session("codex", "hi")
    assert created["id"].startswith("session_")
    assert sleeps == [2.0]
    assert bodies[0] == bodies[1]


def test_4xx_other_than_429_is_not_retried_and_raises_with_param() -> None:
    calls = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(400, json={"error": {"type": "invalid_request",
                                                   "message": "bad", "param": "input[0]"}})

    client, _ = _client(httpx.MockTransport(answer))
    with pytest.raises(ApiError) as err:
        client.send_message("session_" + "a" * 32, "x")
    assert len(calls) == 1
    assert (err.value.status, err.value.type, err.value.param) == (400, "invalid_request",
                                                                   "input[0]")


def test_connection_errors_are_retried_then_reported() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client, sleeps = _client(httpx.MockTransport(answer), attempts=3)
    with pytest.raises(TransportError, match="3 attempts"):
        client.get_session("session_" + "a" * 32)
    assert len(sleeps) == 2


def test_bodies_mint_ids_and_keep_absent_fields_absent() -> None:
    c = create_body("codex", "hi")
    assert uuid.UUID(c["client_request_id"]).version == 4 and c["input"] == "hi"
    m = message_body("hi", tags=["t"])
    assert m["input"] == [{"role": "user", "type": "message",
                           "content": [{"type": "input_text", "text": "hi"}]}]
    assert m["tags"] == ["t"] and "metadata" not in m
    r = tool_result_body("call_1", success=True)
    assert "output" not in r and "error" not in r
    r = tool_result_body("call_1", success=False, output=None, error="boom")
    assert r["output"] is None and r["error"] == "boom"
    assert create_body("codex", "x", client_request_id="mine")["client_request_id"] == "mine"


def test_wait_budget_is_capped_like_the_server() -> None:
    assert wait_params(False, 5) == {}
    assert wait_params(True, 10**9) == {"wait": "true", "timeout_ms": "600000"}


def test_image_part_sniffs_png_and_jpeg() -> None:
    assert image_part(b"\x89PNG\r\n\x1a\nxx")["image_url"].startswith("data:image/png;base64,")
    assert image_part(b"\xff\xd8\xff\xe0")["image_url"].startswith("data:image/jpeg;base64,")
    with pytest.raises(ValueError, match="not a PNG or JPEG"):
        image_part(b"GIF89a")


_text = st.text(alphabet=st.characters(blacklist_characters="\r\n\0",
                                       blacklist_categories=("Cs",)), max_size=30)


@given(st.lists(st.tuples(st.sampled_from(["item", "session", "x"]), _text,
                          st.integers(min_value=1, max_value=10**9)), max_size=8),
       st.integers(min_value=1, max_value=7))
def test_sse_round_trip_whatever_the_chunking(events: list[tuple[str, str, int]],
                                              cut: int) -> None:
    wire = "".join(f": keep-alive\n\nid: {i}\nevent: {e}\ndata: {d}\n\n" for e, d, i in events)
    lines = wire.split("\n")
    parser = SseParser()
    got = [(ev.event, ev.data, int(ev.id or 0)) for ev in parser.feed(iter(lines))]
    assert got == events
    if events:
        assert parser.last_id == str(events[-1][2])


def test_async_client_retries_429_with_the_same_body_and_raises_4xx_with_param() -> None:
    bodies: list[bytes] = []
    sleeps: list[float] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        if len(bodies) == 1:
            return httpx.Response(429, headers={"Retry-After": "3"}, json={})
        if len(bodies) == 2:
            return httpx.Response(202, json={"delivery": "steered", "items": []})
        return httpx.Response(404, json={"error": {"type": "not_found", "message": "no",
                                                   "param": "call_id"}})

    async def sleep(s: float) -> None:
        sleeps.append(s)

    async def go() -> None:
        async with AsyncClient("http://core.test", transport=httpx.MockTransport(answer),
                               sleep=sleep, retry=RetryPolicy(attempts=3, jitter=0)) as c:
            sid = "session_" + "a" * 32
            assert (await c.send_message(sid, "hi"))["delivery"] == "steered"
            with pytest.raises(ApiError) as err:
                await c.submit_tool_result(sid, "call_1", success=True, output="x")
            assert err.value.param == "call_id"

    asyncio.run(go())
    assert sleeps == [3.0]
    assert bodies[0] == bodies[1]
    assert json.loads(bodies[2])["call_id"] == "call_1"


def test_item_follow_resumes_after_the_last_sequence_and_drops_repeats() -> None:
    follow = ItemFollow("session_x", after=0, idle_timeout_s=None)
    assert "Last-Event-ID" not in follow.request()["headers"]

    def sent(seqs: list[int]) -> list[int]:
        got = []
        for n in seqs:
            for line in (f"id: {n}", "event: item", json.dumps({"sequence": n}).join(
                    ["data: ", ""]), ""):
                item = follow.line(line)
                if item is not None:
                    got.append(item["sequence"])
        return got

    assert sent([1, 2, 3]) == [1, 2, 3]
    req = follow.request()  # the stream dropped: reconnect
    assert req["headers"]["Last-Event-ID"] == "3" and req["params"]["after"] == 3
    assert sent([3, 4]) == [4]  # the server repeats 3 after the resume: not yielded twice

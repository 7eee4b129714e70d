"""Image bombs from one tenant on the real stack (issue 62, part 2): tenant A sends 20 bomb
images — the issue's 6324 × 6324 16-bit RGBA PNG of zeros, 311 KB each, 320 MB of scanlines —
as one 20-image request and as 20 one-image requests at once (rounds of them, until tenant B
was answered at least 5 times while bombs were in flight), while tenant B reads its Session
and ``/healthz`` is probed. Every bomb is refused 413 with the image's ``param`` and nothing is
written; every B read and every probe is answered 200; the process's peak RSS does not grow by
one bomb's decode (it grew by ~600 MB per bomb when the image was decoded: the issue). The
latency comparison (B's GET p99 under bombs against alone) is a figure of ``make bench``
(case 6, ``bench/image_bombs.py``), not asserted here."""

from __future__ import annotations

import asyncio
import json
import resource
import uuid

import httpx
import pytest

from bench.image_bombs import bomb_body, bomb_png
from shared.domain.tenancy import key_entry
from tests.support.kafka import read_topic, store_counts
from tests.support.system import SystemFactory

pytestmark = pytest.mark.integration

KEY_A, KEY_B = f"a-{uuid.uuid4().hex}", f"b-{uuid.uuid4().hex}"
MiB = 1024 * 1024


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


async def test_bombs_from_tenant_a_are_refused_while_tenant_b_is_answered(
        make_system: SystemFactory) -> None:
    keys = f"{key_entry('tenantA', KEY_A)},{key_entry('tenantB', KEY_B)}"
    system = await make_system(services=("storage", "admission"), auth_disabled=False,
                               api_keys=keys, memory_limit_bytes=512 * MiB)
    app = system.admission.http

    def client(key: str | None) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://core",
                                 timeout=120, headers=headers)

    a, b, probe = client(KEY_A), client(KEY_B), client(None)
    png = bomb_png()
    assert len(png) < 400 * 1024
    one = bomb_body(png, images=1)
    twenty = bomb_body(png, images=20)
    try:
        r = await b.post("/v1/sessions", json={"harness": "codex", "placement": "none",
                                               "input": "tenant B"})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        before = await store_counts(system.settings)
        admitted_before = len(await read_topic(system.settings, system.topics.session_admitted))
        rss_before = _peak_rss()

        done = asyncio.Event()
        b_statuses: list[int] = []
        probes: list[int] = []
        in_flight = 0  # bomb requests being handled now
        during = 0  # B's reads and probes answered while a bomb request was in flight

        async def reads() -> None:
            nonlocal during
            while not done.is_set():
                b_statuses.append((await b.get(f"/v1/sessions/{sid}")).status_code)
                probes.append((await probe.get("/healthz")).status_code)
                during += 1 if in_flight else 0
                await asyncio.sleep(0.005)

        async def bomb(body: bytes) -> httpx.Response:
            nonlocal in_flight
            in_flight += 1
            try:
                return await a.post("/v1/sessions", content=body,
                                    headers={"content-type": "application/json"})
            finally:
                in_flight -= 1

        reader = asyncio.create_task(reads())
        started = asyncio.get_running_loop().time()
        answers: list[httpx.Response] = []
        rounds = 0
        # rounds of 20 one-bomb requests and the 20-bomb one at once, until B was answered
        # at least 5 times while bombs were being handled (at most 10 rounds)
        while rounds < 10 and (rounds == 0 or during < 5):
            answers += await asyncio.gather(bomb(twenty), *(bomb(one) for _ in range(20)))
            rounds += 1
        took = asyncio.get_running_loop().time() - started
        done.set()
        await reader
        assert during >= 5, (during, rounds)

        for r in answers:
            assert r.status_code == 413, r.text
            err = r.json()["error"]
            assert err["type"] == "request_too_large"
            assert err["param"] == "input[0].content[0].image_url", err
            assert "bytes to decode" in err["message"], err
        assert b_statuses and set(b_statuses) == {200}, b_statuses
        assert probes and set(probes) == {200}
        # nothing written, nothing handed over
        assert await store_counts(system.settings) == before
        assert len(await read_topic(system.settings,
                                    system.topics.session_admitted)) == admitted_before
        grew = _peak_rss() - rss_before
        assert grew < 300 * MiB, grew  # one bomb decoded would be 320 MB of scanlines alone
        print(f"\n[bombs] {rounds} rounds of 21 requests (40 bombs) refused 413 in {took:.2f} s; "
              f"{during} of B's reads answered while bombs were in flight; B answered "
              f"{len(b_statuses)} "
              f"GETs and {len(probes)} probes, all 200; peak RSS grew {grew / MiB:.0f} MiB")
    finally:
        for c in (a, b, probe):
            await c.aclose()


def test_the_bomb_is_the_issues() -> None:
    png = bomb_png()
    ihdr = png[16:29]
    assert int.from_bytes(ihdr[0:4], "big") == int.from_bytes(ihdr[4:8], "big") == 6324
    assert (ihdr[8], ihdr[9]) == (16, 6)  # 16-bit RGBA
    body = bomb_body(png)
    assert 8_000_000 < len(body) < 9_000_000  # the issue's 8.3 MB request
    assert len(json.loads(body)["input"][0]["content"]) == 20

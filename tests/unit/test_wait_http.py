"""The HTTP side of ``?wait=true`` with a fake Admission (no infrastructure): the per-tenant bound
(the tenant of the request's API key), the 429 decided before anything
is admitted, and the answer when the Turn ends through the shared Item tail."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from services.admission.core import Answer
from services.admission.domain.waiting import TurnWatch
from services.admission.http import build_http_app
from shared.domain.tenancy import key_entry
from shared.settings import Settings

SID = "session_" + "a" * 32
Json = dict[str, Any]


class FakeItems:
    def __init__(self) -> None:
        self.queues: list[asyncio.Queue[Json]] = []

    def listen(self, session_id: str) -> asyncio.Queue[Json]:
        q: asyncio.Queue[Json] = asyncio.Queue()
        self.queues.append(q)
        return q

    def unlisten(self, session_id: str, q: asyncio.Queue[Json]) -> None:
        self.queues.remove(q)


class FakeAdmission:
    def __init__(self) -> None:
        self.items = FakeItems()
        self.admitted: list[Json] = []

    async def add_event(self, session_id: str, body: Json, *, tenant: str) -> Answer:
        n = len(self.admitted) + 1
        self.admitted.append(body)
        item = {"id": f"item_{n}", "session_id": session_id, "sequence": n, "type": "message",
                "turn_id": "turn_1"}
        return Answer(202, {"event_id": f"evt_{n}", "delivery": "steered", "items": [item]},
                      session_id=session_id)

    async def catch_up(self, session_id: str, watch: TurnWatch) -> None:
        return None


async def _ready() -> bool:
    return True


KEYS = {"a": "key-of-tenant-a", "b": "key-of-tenant-b"}


def auth(tenant: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[tenant]}"}


def make_app(fake: FakeAdmission, per_tenant: int) -> Any:
    entries = ",".join(key_entry(t, k) for t, k in KEYS.items())
    return build_http_app(Settings(api_keys=entries, max_concurrent_waits=10,
                                   max_concurrent_waits_per_tenant=per_tenant),
                          lambda: fake, _ready)  # type: ignore[arg-type,return-value]


BODY = {"type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}


async def test_per_tenant_bound_and_429_before_admission() -> None:
    fake = FakeAdmission()
    app = make_app(fake, per_tenant=1)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://core", timeout=30) as c:
        path = f"/v1/sessions/{SID}/events"
        first = asyncio.create_task(c.post(path, json=BODY, headers=auth("a"),
                                           params={"wait": "true", "timeout_ms": "20000"}))
        for _ in range(200):
            if fake.items.queues:
                break
            await asyncio.sleep(0.01)
        assert len(fake.admitted) == 1 and len(fake.items.queues) == 1
        refused = await c.post(path, json=BODY, headers=auth("a"),
                               params={"wait": "true"})
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limited"
        assert refused.headers["retry-after"] == "1"
        assert len(fake.admitted) == 1  # the refused request was never admitted
        other = await c.post(path, json=BODY, headers=auth("b"),
                             params={"wait": "true", "timeout_ms": "50"})
        assert other.status_code == 202  # another tenant has its own bound; budget ran out
        assert [it["sequence"] for it in other.json()["items"]] == [2]
        # the first wait's Turn ends: Items from the tail (one repeated, one of another Turn)
        q = fake.items.queues[0]
        for it in ({"sequence": 3, "type": "turn", "turn_id": "turn_9", "state": "completed"},
                   {"sequence": 4, "type": "turn", "turn_id": "turn_1", "state": "completed",
                    "schema": "session.item/1"},
                   {"sequence": 4, "type": "turn", "turn_id": "turn_1", "state": "completed"}):
            q.put_nowait({"session_id": SID, "id": f"item_{it['sequence']}", **it})
        done = await asyncio.wait_for(first, 20)
        assert done.status_code == 200
        assert [(it["sequence"], it["type"]) for it in done.json()["items"]] == [
            (1, "message"), (4, "turn")]
        assert "schema" not in done.json()["items"][1]
        again = await c.post(path, json=BODY, headers=auth("a"),
                             params={"wait": "true", "timeout_ms": "50"})
        assert again.status_code == 202  # the slot of tenant a is free again


async def test_timeout_ms_is_checked_before_anything() -> None:
    fake = FakeAdmission()
    app = make_app(fake, per_tenant=1)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://core") as c:
        for path in (f"/v1/sessions/{SID}/events", "/v1/sessions"):
            for bad in ("0", "-1", "1.5"):
                r = await c.post(path, json=BODY, headers=auth("a"),
                                 params={"wait": "true", "timeout_ms": bad})
                assert r.status_code == 400 and r.json()["error"]["param"] == "timeout_ms"
        r = await c.post("/v1/sessions", params={"wait": "true"}, headers=auth("a"),
                         json={"harness": "codex", "placement": "none", "input": "x",
                               "stream": True})
        assert r.status_code == 400 and r.json()["error"]["param"] == "wait"
    assert fake.admitted == []


async def test_timeout_ms_above_the_cap_waits_600s(monkeypatch: Any) -> None:
    """CONTRACT §1 / seed 004: the budget is "capped at 600000" — a larger ``timeout_ms`` is
    admitted and waits at most 600 s, it is not a 400."""
    budgets: list[float | None] = []
    real_wait = asyncio.wait

    async def recording_wait(fs: Any, *, timeout: float | None = None, **kw: Any) -> Any:
        budgets.append(timeout)
        return await real_wait(fs, timeout=timeout, **kw)

    monkeypatch.setattr(asyncio, "wait", recording_wait)
    fake = FakeAdmission()
    app = make_app(fake, per_tenant=4)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://core", timeout=30) as c:
        for n, raw in enumerate(("600001", "86400000", "9" * 40), start=1):
            budgets.clear()  # other waits of the app (probes, short timeouts) are recorded too
            task = asyncio.create_task(c.post(f"/v1/sessions/{SID}/events", json=BODY,
                                              headers=auth("a"),
                                              params={"wait": "true", "timeout_ms": raw}))
            for _ in range(500):
                if fake.items.queues:
                    break
                await asyncio.sleep(0.01)
            assert len(fake.admitted) == n, await task  # admitted, not refused
            fake.items.queues[0].put_nowait({"session_id": SID, "id": "item_end", "sequence": 99,
                                             "type": "turn", "turn_id": "turn_1",
                                             "state": "completed"})
            r = await asyncio.wait_for(task, 20)
            assert r.status_code == 200, r.text
            assert max(b for b in budgets if b is not None) == 600.0, budgets

"""Every HTTP error answer has the contract's shape, also for unknown paths and methods, and a
bad bearer key is refused before anything else runs."""

from __future__ import annotations

import httpx
import pytest
from aiokafka.errors import KafkaConnectionError
from pymongo.errors import AutoReconnect, ConnectionFailure, ServerSelectionTimeoutError

from services.admission.http import build_http_app
from shared.domain.tenancy import key_entry
from shared.settings import Settings


async def _ready() -> bool:
    return True


def _unused() -> None:
    raise AssertionError("no use case may run for these requests")


@pytest.mark.parametrize(("method", "path", "status", "etype"), [
    ("GET", "/nope", 404, "not_found"),
    ("DELETE", "/v1/sessions", 405, "invalid_request"),
    ("PUT", "/v1/sessions/session_" + "0" * 32, 405, "invalid_request"),
])
async def test_unknown_paths_and_methods(method: str, path: str, status: int, etype: str) -> None:
    app = build_http_app(Settings(auth_disabled=True), _unused, _ready)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://core") as c:
        r = await c.request(method, path)
    assert r.status_code == status
    assert set(r.json()) == {"error"}
    assert r.json()["error"]["type"] == etype and r.json()["error"]["param"] is None


@pytest.mark.parametrize("auth", [None, "Bearer wrong", "Basic abc", "Bearer "])
async def test_bad_key_is_refused(auth: str | None) -> None:
    keys = f"{key_entry('a', 'k1')},{key_entry('b', 'k2')}"
    app = build_http_app(Settings(api_keys=keys), _unused, _ready)  # type: ignore[arg-type]
    headers = {"Authorization": auth} if auth else {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://core") as c:
        r = await c.post("/v1/sessions", json={}, headers=headers)
        health = await c.get("/healthz")
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
    assert health.status_code == 200  # probes need no key


class _StoreAway:
    """An Admission whose store (or broker) is unreachable on every use case."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def create_session(self, body: object, *, tenant: str, checked: object = None) -> None:
        raise self.exc

    async def add_event(self, session_id: str, body: object, *, tenant: str) -> None:
        raise self.exc

    async def get_session(self, session_id: str, *, tenant: str) -> None:
        raise self.exc

    async def list_items(self, session_id: str, after: int, limit: int, *,
                         tenant: str) -> None:
        raise self.exc


@pytest.mark.parametrize("exc", [
    ServerSelectionTimeoutError("no servers"), AutoReconnect("connection reset"),
    ConnectionFailure("the store did not answer a ping"), KafkaConnectionError("broker away"),
])
async def test_unreachable_dependency_answers_503(exc: Exception) -> None:
    """Store / broker unreachable → 503 ``unavailable`` with Retry-After, never 500."""
    away = _StoreAway(exc)
    app = build_http_app(Settings(auth_disabled=True), lambda: away, _ready)  # type: ignore[arg-type,return-value]
    sid = "session_" + "0" * 32
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://core") as c:
        answers = [
            await c.post("/v1/sessions", json={"harness": "codex", "input": "hi"}),
            await c.post(f"/v1/sessions/{sid}/events",
                         json={"type": "agent.session.input.message", "input": "hi"}),
            await c.get(f"/v1/sessions/{sid}"),
            await c.get(f"/v1/sessions/{sid}/items"),
        ]
    for r in answers:
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert set(r.json()) == {"error"} and (err["type"], err["param"]) == ("unavailable", None)
        assert r.headers["retry-after"] == "1"


async def test_other_errors_stay_500() -> None:
    away = _StoreAway(RuntimeError("a bug"))
    app = build_http_app(Settings(auth_disabled=True), lambda: away, _ready)  # type: ignore[arg-type,return-value]
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://core") as c:
        r = await c.get("/v1/sessions/session_" + "0" * 32)
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"

"""Every HTTP error answer has the contract's shape, also for unknown paths and methods, and a
bad bearer key is refused before anything else runs."""

from __future__ import annotations

import httpx
import pytest

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

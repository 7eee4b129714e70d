"""API keys (hashed, per tenant), the HTTP middleware that authenticates and caps each tenant's
requests in flight, the tenant on the Session state, and the ``hash-key`` command."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import httpx
import pytest

from services import cli
from services.admission.core import Answer
from services.admission.http import build_http_app
from services.storage.domain.sessions import SessionState, decide_create
from shared import storekeys
from shared.domain.tenancy import (
    DEFAULT_TENANT,
    ApiKeys,
    bearer,
    key_digest,
    key_entry,
)
from shared.settings import Settings

SID = "session_" + "a" * 32
KEY_A, KEY_A2, KEY_B = "key-of-acme", "second-key-of-acme", "key-of-beta"
KEYS = ",".join([key_entry("acme", KEY_A), key_entry("acme", KEY_A2), key_entry("beta", KEY_B)])


# ---- keys --------------------------------------------------------------------------------------


def test_an_entry_is_the_tenant_and_the_hex_sha256_of_the_key() -> None:
    entry = key_entry("acme", KEY_A)
    assert entry == "acme:" + hashlib.sha256(KEY_A.encode()).hexdigest()
    assert KEY_A not in entry and key_digest(KEY_A) in entry


def test_keys_resolve_to_their_tenant() -> None:
    keys = ApiKeys.parse(KEYS)
    assert keys.tenant_of(KEY_A) == "acme"
    assert keys.tenant_of(KEY_A2) == "acme"  # several keys per tenant (rotation)
    assert keys.tenant_of(KEY_B) == "beta"
    for wrong in ("", "key-of-acm", KEY_A + " ", key_digest(KEY_A), "acme"):
        assert keys.tenant_of(wrong) is None, wrong


def test_parse_tolerates_spaces_upper_case_hex_and_empty_parts() -> None:
    raw = f" acme : {key_digest(KEY_A).upper()} ,, beta:{key_digest(KEY_B)},"
    keys = ApiKeys.parse(raw)
    assert keys.tenant_of(KEY_A) == "acme" and keys.tenant_of(KEY_B) == "beta"
    assert ApiKeys.parse("").entries == ()


@pytest.mark.parametrize("raw", [
    KEY_A,  # a plain key: never accepted as configuration
    f"{key_digest(KEY_A)}",  # no tenant
    f"acme:{key_digest(KEY_A)[:-1]}",  # 63 hex digits
    f"acme:{key_digest(KEY_A)[:-1]}g",  # not hex
    f"ac me:{key_digest(KEY_A)}",  # not a tenant name
    f":{key_digest(KEY_A)}",
    f"acme:{key_digest(KEY_A)},beta:{key_digest(KEY_A)}",  # one key, two tenants
])
def test_malformed_configuration_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="api_keys entry"):
        ApiKeys.parse(raw)
    with pytest.raises(ValueError):
        build_http_app(Settings(api_keys=raw), _unused, _ready)  # type: ignore[arg-type]


def test_the_plain_key_never_appears_in_the_refusal() -> None:
    with pytest.raises(ValueError) as exc:
        ApiKeys.parse(f"acme:{key_digest(KEY_A)},{KEY_B}")
    assert KEY_B not in str(exc.value)


@pytest.mark.parametrize(("header", "key"), [
    ("Bearer abc", "abc"), ("bearer abc", "abc"), ("Bearer  abc ", "abc"),
    ("Bearer ", None), ("Basic abc", None), ("", None), ("abc", None),
])
def test_bearer(header: str, key: str | None) -> None:
    assert bearer(header) == key


def test_invalid_tenant_names_make_no_entry() -> None:
    for bad in ("", "a:b", "a,b", "-a", "x" * 65):
        with pytest.raises(ValueError):
            key_entry(bad, "k")
    with pytest.raises(ValueError):
        key_entry("acme", "")


# ---- the hash-key command ----------------------------------------------------------------------


def test_hash_key_prints_the_entry_of_a_given_key(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.hash_key(["acme", KEY_A]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == key_entry("acme", KEY_A)


def test_hash_key_generates_a_key_shown_once_on_stderr(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.hash_key(["acme"]) == 0
    out = capsys.readouterr()
    key = out.err.strip().rsplit(" ", 1)[-1]
    assert len(key) > 40 and key not in out.out
    assert ApiKeys.parse(out.out.strip()).tenant_of(key) == "acme"


def test_hash_key_refuses_a_bad_tenant(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.hash_key(["a:b", "k"]) == 2
    assert capsys.readouterr().out == ""


# ---- the Session's tenant ----------------------------------------------------------------------


def _admitted(**extra: Any) -> dict[str, Any]:
    return {"request_id": "req_1", "event_id": "evt_1", "session_id": SID, "fingerprint": "fp",
            "harness": "codex", "placement": "none", "client_request_id": "c-1",
            "messages": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}],
            **extra}


def test_a_session_belongs_to_the_tenant_of_its_creation() -> None:
    d = decide_create(_admitted(tenant="acme"), "2026-01-01T00:00:00.000Z")
    assert d.state is not None and d.state.tenant == "acme"
    assert d.state.to_doc()["tenant"] == "acme"
    assert SessionState.from_doc(d.state.to_doc()).tenant == "acme"
    # idempotency of creation is per tenant
    assert [i["_id"] for i in d.idempotency] == [storekeys.create_key("acme", "c-1")]
    assert storekeys.create_key("acme", "c-1") != storekeys.create_key("beta", "c-1")


def test_without_a_tenant_a_session_is_the_default_tenants() -> None:
    d = decide_create(_admitted(), "2026-01-01T00:00:00.000Z")
    assert d.state is not None and d.state.tenant == DEFAULT_TENANT
    doc = d.state.to_doc()
    del doc["tenant"]  # a Session stored before tenancy
    assert SessionState.from_doc(doc).tenant == DEFAULT_TENANT


# ---- the middleware ----------------------------------------------------------------------------


async def _ready() -> bool:
    return True


def _unused() -> None:
    raise AssertionError("no use case may run for these requests")


class FakeAdmission:
    """Records the tenant each use case is called with; ``hold`` keeps acme's reads in flight."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.hold = asyncio.Event()
        self.hold.set()
        self.held: asyncio.Queue[None] = asyncio.Queue()  # one entry per held request

    async def get_session(self, session_id: str, *, tenant: str) -> Answer:
        self.calls.append(("get_session", tenant))
        if tenant == "acme" and not self.hold.is_set():
            self.held.put_nowait(None)
            await self.hold.wait()
        return Answer(200, {"id": session_id, "tenant": tenant})

    async def list_items(self, session_id: str, after: int, limit: int, *, tenant: str
                         ) -> Answer:
        self.calls.append(("list_items", tenant))
        return Answer(200, {"items": []})

    async def get_tool_result(self, session_id: str, call_id: str, *, tenant: str) -> Answer:
        self.calls.append(("get_tool_result", tenant))
        return Answer(200, {})

    async def create_session(self, body: Any, *, tenant: str, checked: Any = None) -> Answer:
        self.calls.append(("create_session", tenant))
        return Answer(201, {})

    async def add_event(self, session_id: str, body: Any, *, tenant: str) -> Answer:
        self.calls.append(("add_event", tenant))
        return Answer(202, {})


def _client(settings: Settings, adm: FakeAdmission) -> tuple[Any, httpx.AsyncClient]:
    app = build_http_app(settings, lambda: adm, _ready)  # type: ignore[arg-type,return-value]
    return app, httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                  base_url="http://core")


async def _every_path(c: httpx.AsyncClient, key: str) -> None:
    h = {"Authorization": f"Bearer {key}"}
    assert (await c.get(f"/v1/sessions/{SID}", headers=h)).status_code == 200
    assert (await c.get(f"/v1/sessions/{SID}/items", headers=h)).status_code == 200
    assert (await c.get(f"/v1/sessions/{SID}/tool_results/c1", headers=h)).status_code == 200
    assert (await c.post("/v1/sessions", json={}, headers=h)).status_code == 201
    assert (await c.post(f"/v1/sessions/{SID}/events", json={},
                         headers=h)).status_code == 202


async def test_every_use_case_gets_the_tenant_of_the_key() -> None:
    adm = FakeAdmission()
    _, c = _client(Settings(api_keys=KEYS), adm)
    async with c:
        await _every_path(c, KEY_A2)
        await _every_path(c, KEY_B)
    uses = ["get_session", "list_items", "get_tool_result", "create_session", "add_event"]
    assert adm.calls == [(u, "acme") for u in uses] + [(u, "beta") for u in uses]


async def test_auth_disabled_is_the_default_tenant_without_a_key() -> None:
    adm = FakeAdmission()
    _, c = _client(Settings(auth_disabled=True, api_keys=""), adm)
    async with c:
        r = await c.get(f"/v1/sessions/{SID}")
    assert r.status_code == 200 and r.json()["tenant"] == DEFAULT_TENANT


@pytest.mark.parametrize("auth", [None, "Bearer wrong", f"Basic {KEY_A}", "Bearer ",
                                  f"Bearer {key_digest(KEY_A)}"])
async def test_a_missing_or_wrong_key_is_401_and_runs_nothing(auth: str | None) -> None:
    adm = FakeAdmission()
    _, c = _client(Settings(api_keys=KEYS), adm)
    async with c:
        r = await c.get(f"/v1/sessions/{SID}",
                        headers={"Authorization": auth} if auth else {})
    assert r.status_code == 401
    assert r.json() == {"error": {"type": "unauthorized", "param": None,
                                  "message": "missing or wrong bearer API key"}}
    assert adm.calls == []


async def test_a_tenant_at_its_cap_gets_429_while_another_is_served() -> None:
    adm = FakeAdmission()
    adm.hold.clear()
    app, c = _client(Settings(api_keys=KEYS, max_inflight_per_tenant=2), adm)
    a = {"Authorization": f"Bearer {KEY_A}"}
    async with c:
        held = [asyncio.create_task(c.get(f"/v1/sessions/{SID}", headers=a)) for _ in range(2)]
        for _ in held:
            await adm.held.get()  # both are inside the use case, so both are counted
        assert app.state.inflight == {"acme": 2}
        r = await c.post(f"/v1/sessions/{SID}/events", json={},
                         headers={"Authorization": f"Bearer {KEY_A2}"})  # same tenant
        assert r.status_code == 429
        assert r.json()["error"]["type"] == "rate_limited"
        assert r.headers["Retry-After"] == "1"
        assert ("add_event", "acme") not in adm.calls  # refused before any work
        b = await c.get(f"/v1/sessions/{SID}", headers={"Authorization": f"Bearer {KEY_B}"})
        assert b.status_code == 200 and b.json()["tenant"] == "beta"
        assert (await c.get("/healthz")).status_code == 200  # probes are never capped
        adm.hold.set()
        assert [t.status_code for t in await asyncio.gather(*held)] == [200, 200]
        assert app.state.inflight == {}
        r = await c.post(f"/v1/sessions/{SID}/events", json={}, headers=a)
        assert r.status_code == 202

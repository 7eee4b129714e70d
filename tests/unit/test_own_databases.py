"""Each service's collections live in the database its settings name (``Settings.database_of``):
the receipt tracker and the dispatcher may have databases of their own, storage has
``mongodb_database``, and admission reads storage's. Unset, every service uses one database, as
deployments from before these settings did. The local stack, the tests and the bench give the
tracker and the dispatcher their own (``shared.store.own_databases``; docs/storage.md, "A writer
per database")."""

from __future__ import annotations

from typing import Any

import pytest

from deploy.local.stack import components
from services.admission.app import AdmissionService
from services.dispatcher.app import DispatcherService
from services.receipts.app import ReceiptService
from services.storage.app import StorageService
from shared.ownership import OWNERS
from shared.settings import OWN_DATABASE_FIELDS, Settings
from shared.store import own_databases, own_databases_env

SERVICES = ("storage", "admission", "dispatcher", "receipts")


def settings(**values: Any) -> Settings:
    return Settings(mongodb_database="core", **values)


@pytest.mark.parametrize("service", SERVICES)
def test_unset_every_service_uses_the_one_database(service: str) -> None:
    assert settings().database_of(service) == "core"


def test_the_tracker_and_the_dispatcher_use_their_own_when_named() -> None:
    s = settings(mongodb_receipts_database="rcpt", mongodb_dispatcher_database="disp")
    assert s.database_of("receipts") == "rcpt"
    assert s.database_of("dispatcher") == "disp"
    # storage keeps ``mongodb_database``; admission reads storage's collections there
    assert s.database_of("storage") == "core"
    assert s.database_of("admission") == "core"


def test_only_services_that_read_no_other_services_collections_may_move() -> None:
    """A service that moves must own every collection it touches: the tracker and the
    dispatcher read only their own (shared/ownership.py; test_collection_ownership greps
    it)."""
    owners = set(OWNERS.values())
    assert set(OWN_DATABASE_FIELDS) <= owners - {"storage"}


def test_own_databases_names_one_per_movable_service() -> None:
    assert own_databases("t1") == {"mongodb_receipts_database": "t1_receipts",
                                   "mongodb_dispatcher_database": "t1_dispatcher"}
    s = settings(**own_databases("core"))
    assert {s.database_of(x) for x in SERVICES} == {"core", "core_receipts", "core_dispatcher"}
    # the environment form reaches the same settings
    assert set(own_databases_env("t1")) == {
        "SESSION_CORE_MONGODB_RECEIPTS_DATABASE", "SESSION_CORE_MONGODB_DISPATCHER_DATABASE"}


def test_the_local_stack_deploys_them_by_the_same_names(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """The launcher cannot import the product (it runs before the venv exists): its copy of
    the names must agree with ``shared.store.own_databases_env``."""
    for name in ("SESSION_CORE_MONGODB_DATABASE", *own_databases_env("x")):
        monkeypatch.delenv(name, raising=False)
    assert components.own_databases_env() == own_databases_env("session_core")
    monkeypatch.setenv("SESSION_CORE_MONGODB_DATABASE", "mine")
    assert components.own_databases_env() == own_databases_env("mine")
    monkeypatch.setenv("SESSION_CORE_MONGODB_RECEIPTS_DATABASE", "chosen")
    assert components.own_databases_env()["SESSION_CORE_MONGODB_RECEIPTS_DATABASE"] == "chosen"


@pytest.mark.parametrize(("cls", "service"), [
    (StorageService, "storage"), (AdmissionService, "admission"),
    (DispatcherService, "dispatcher"), (ReceiptService, "receipts")])
async def test_each_service_opens_the_database_of_its_collections(cls: Any, service: str
                                                                   ) -> None:
    s = settings(**own_databases("core"), auth_disabled=True)
    svc = cls(s)
    try:
        assert svc.db.name == s.database_of(service)
    finally:
        await svc.client.close()

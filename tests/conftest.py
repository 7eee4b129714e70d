"""Test-wide fixtures: the real infrastructure (Kafka + a MongoDB-wire store) and per-test settings.

``stack`` (session scope) is started at most once per test run, and only when a test needs it:
tests marked ``integration``, ``e2e`` or ``faults`` get it automatically; any other test gets it
by asking for ``stack`` or ``settings``. Unit tests never start anything.

Where the stack comes from, in order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` and ``MONGODB_URI`` both set: used as they are, nothing started.
2. A Docker engine is reachable and ``SESSION_CORE_USE_TESTCONTAINERS=1``: Kafka and MongoDB
   containers via testcontainers (imported lazily; not exercised on the Docker-less CI machines).
3. Otherwise the local stack (``deploy.local.stack.Stack``: Kafka 4 KRaft from Maven jars +
   FerretDB/SQLite) comes up on free ports with a private state dir in ``/tmp`` (not pytest's
   basetemp, which concurrent pytest runs prune), and goes down at the end of the session. If only
   one of the two variables is set, only the other component is started.
   ``SESSION_CORE_TEST_STATE_DIR`` pins the state dir (``.ci/run`` uses it to clean up after a
   killed run).

Under pytest-xdist (``make test`` runs ``-n``) the controller starts that one local stack before
the workers exist and exports ``KAFKA_BOOTSTRAP_SERVERS`` / ``MONGODB_URI``, so every worker
takes case 1: one stack per test run, shared by the workers, each test on its own topics and
databases (the ``settings`` fixture). A run that names only ``tests/unit`` starts nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings as hypothesis_settings

from deploy.local.stack import free_port
from shared.settings import Settings
from shared.store import own_databases
from tests.support.budget import EVERYDAY_FLOOR, FULL
from tests.support.stack import Stack, docker_reachable, local_stack, testcontainers_stack

if TYPE_CHECKING:
    from tests.support.system import System, SystemFactory

STACK_MARKERS = ("integration", "e2e", "faults")

# Hypothesis tests without a budget of their own (tests/support/budget.py): 20 examples in
# `make test`, Hypothesis's default in `make test-slow` and CI
hypothesis_settings.register_profile("everyday", max_examples=EVERYDAY_FLOOR)
hypothesis_settings.load_profile("default" if FULL else "everyday")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every Hypothesis test (``@given`` or a state machine's TestCase) is ``deep``: `make test`
    runs it at its everyday budget and `make test-slow` selects it again at full budget."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.deep)


def xdist_scope(nodeid: str) -> str:
    """The unit of work an xdist worker takes whole (``make test``'s ``--dist loadgroup``): a
    directory of ``tests/e2e`` (each directory's package fixture launches a Core of its own:
    processes a second worker would start again), else a module (its module-scoped fixtures
    start once)."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[:2] == ["tests", "e2e"]:
        return "/".join(parts[:-1])
    return path


@pytest.hookimpl(optionalhook=True)  # (unknown where xdist is off: -p no:xdist)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` by ``xdist_scope``. xdist's own loadgroup reads groups from a suffix
    it appends to node ids, and pytest 9.2's structured node ids drop it: every group was spread
    over both workers, each starting every e2e Core (pytest-dev/pytest-xdist#1386)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    return ByScope(config, log)


def _xdist_controller(config: pytest.Config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def _only_unit_tests(config: pytest.Config) -> bool:
    args = [a.split("::")[0] for a in config.args if not a.startswith("-")]
    return bool(args) and all(Path(a).resolve().is_relative_to(Path(__file__).parent / "unit")
                              for a in args)


def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller's one shared stack (see the module's docstring)."""
    if not _xdist_controller(config) or _only_unit_tests(config):
        return
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") and os.environ.get("MONGODB_URI"):
        return
    pinned = os.environ.get("SESSION_CORE_TEST_STATE_DIR")
    state_dir = Path(pinned) if pinned else Path(tempfile.mkdtemp(prefix="session-core-stack-"))
    st = local_stack(state_dir)
    config.stash[_SHARED_STACK] = (st, state_dir, bool(pinned))
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = st.bootstrap
    os.environ["MONGODB_URI"] = st.mongodb_uri
    os.environ[_SHARED_STACK_ENV] = json.dumps(
        {"state_dir": str(state_dir), "kafka_port": st.kafka_port, "mongo_port": st.mongo_port})


def pytest_unconfigure(config: pytest.Config) -> None:
    shared = config.stash.get(_SHARED_STACK, None)
    if shared is None:
        return
    st, state_dir, pinned = shared
    os.environ.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    os.environ.pop("MONGODB_URI", None)
    os.environ.pop(_SHARED_STACK_ENV, None)
    st.down()
    if not pinned:
        shutil.rmtree(state_dir, ignore_errors=True)


_SHARED_STACK = pytest.StashKey[tuple[Stack, Path, bool]]()
# what a worker knows of the controller's stack: its state dir and ports (never to stop it)
_SHARED_STACK_ENV = "SESSION_CORE_TEST_SHARED_STACK"


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    kafka_env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    mongo_env = os.environ.get("MONGODB_URI")
    if kafka_env and mongo_env:
        shared = json.loads(os.environ.get(_SHARED_STACK_ENV) or "{}")
        yield Stack(bootstrap=kafka_env, mongodb_uri=mongo_env,
                    kind="shared-local" if shared else "external",
                    state_dir=Path(shared["state_dir"]) if shared else None,
                    kafka_port=shared.get("kafka_port", 0), mongo_port=shared.get("mongo_port", 0))
        return
    if os.environ.get("SESSION_CORE_USE_TESTCONTAINERS") == "1" and docker_reachable():
        st = testcontainers_stack()
        try:
            yield st
        finally:
            for close in st._closers:
                with contextlib.suppress(Exception):
                    close()
        return
    pinned = os.environ.get("SESSION_CORE_TEST_STATE_DIR")
    # Not under pytest's basetemp: every pytest run on the machine prunes old basetemps
    # (keeps 3), which would delete a running stack's data and PID files under it.
    state_dir = Path(pinned) if pinned else Path(tempfile.mkdtemp(prefix="session-core-stack-"))
    st = local_stack(state_dir)
    try:
        yield st
    finally:
        st.down()
        if not pinned:
            shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _stack_for_marked_tests(request: pytest.FixtureRequest) -> None:
    """Tests marked integration / e2e / faults get the stack even if they don't ask for it."""
    if any(request.node.get_closest_marker(m) for m in STACK_MARKERS):
        request.getfixturevalue("stack")


@pytest.fixture
def settings(stack: Stack) -> Settings:
    """Settings pointing at the stack, with a topic prefix, database and HTTP port of this test's
    own (other test runs on the same machine may hold 8080), and no health server."""
    tag = uuid.uuid4().hex[:8]
    values: dict[str, Any] = {
        # the two infrastructure fields are read by their alias (the platforms' names)
        "KAFKA_BOOTSTRAP_SERVERS": stack.bootstrap,
        "MONGODB_URI": stack.mongodb_uri,
        "topic_prefix": f"t{tag}.",
        "mongodb_database": f"t{tag}",
        **own_databases(f"t{tag}"),  # as the local stack deploys (shared.store.own_databases)
        "http_host": "127.0.0.1",
        "http_port": free_port(),
        "health_port": 0,
    }
    return Settings(**values)


# What every in-process System of a test starts with, unless the test says otherwise.
SYSTEM_DEFAULTS: dict[str, Any] = {"auth_disabled": True, "topic_partitions": 2,
                                   "binding_wait_timeout_s": 8.0,
                                   "runtime_heartbeat_timeout_s": 4.0}
ALL_SERVICES = ("storage", "admission", "dispatcher", "receipts")


@pytest.fixture
async def make_system(settings: Settings) -> AsyncIterator[SystemFactory]:
    """The one way tests start the services in-process (``tests/support/system.py``): on the
    real stack with this test's settings, ``SYSTEM_DEFAULTS`` and the test's ``overrides``;
    ``services`` names which of the four run. Every System it started is stopped at the end."""
    from tests.support.system import System  # the services are imported only where one runs

    started: list[System] = []

    async def make(services: tuple[str, ...] = ALL_SERVICES, **overrides: Any) -> System:
        s = settings.model_copy(update={**SYSTEM_DEFAULTS, **overrides})
        sys_ = await System(s).start(services=services)
        started.append(sys_)
        return sys_

    try:
        yield make
    finally:
        for sys_ in reversed(started):
            await sys_.stop()


@pytest.fixture
async def system(make_system: SystemFactory) -> System:
    """The whole system on the real stack, with this test's own topics and database."""
    return await make_system()


@pytest.fixture
def spans() -> Iterator[Any]:
    """Tracing on, spans kept in memory (an ``InMemorySpanExporter``), for the services and
    Runtimes made after it (request it before ``make_system``); off again afterwards."""
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from runtimes.traces import TRACES
    from shared import tracing

    exporter = InMemorySpanExporter()
    tracing.enable(SimpleSpanProcessor(exporter))
    try:
        yield exporter
    finally:
        tracing.disable()
        TRACES.use(None)

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
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from deploy.local.stack import Stack as LocalStack
from deploy.local.stack import free_port
from shared.settings import Settings

REPO = Path(__file__).resolve().parent.parent
# the launcher's command line (run from REPO)
STACK_CLI = [sys.executable, "-m", "deploy.local.stack"]
STACK_MARKERS = ("integration", "e2e", "faults")


@dataclass
class Stack:
    """Where the infrastructure is. ``kind`` is ``external``, ``testcontainers`` or ``local``."""

    bootstrap: str
    mongodb_uri: str
    kind: str
    state_dir: Path | None = None
    kafka_port: int = 0
    mongo_port: int = 0
    controller_port: int = 0
    local: LocalStack | None = None
    _closers: list[Any] = field(default_factory=list, repr=False)

    # --- control (local stack only; fault tests use these to take a component away) ---------
    @property
    def controllable(self) -> bool:
        return self.kind == "local"

    def stop(self, component: str, kill: bool = False) -> None:
        """Stop ``kafka`` or ``ferretdb`` (SIGTERM, then SIGKILL; ``kill``: SIGKILL at once, a
        crash) and wait until it is gone."""
        if self.local is None:
            pytest.skip(f"cannot stop {component} of a {self.kind} stack")
        self.local.stop(component, kill=kill)

    def start(self, component: str) -> None:
        """Start ``kafka`` or ``ferretdb`` again and wait until it is ready."""
        if self.local is None:
            pytest.skip(f"cannot start {component} of a {self.kind} stack")
        self.local.start(component)

    def up(self) -> None:
        assert self.local is not None
        self.local.up()

    def down(self) -> None:
        assert self.local is not None
        self.local.down()


def _docker_reachable() -> bool:
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(1)
                s.connect(host[len("unix://"):])
            return True
        if host.startswith("tcp://"):
            h, _, p = host[len("tcp://"):].partition(":")
            with socket.create_connection((h, int(p or 2375)), timeout=1):
                return True
    except OSError:
        return False
    return False


def _testcontainers_stack() -> Stack:  # pragma: no cover - needs a Docker engine
    # Imported here: testcontainers is not a dependency on the Docker-less machines.
    from testcontainers.kafka import KafkaContainer  # type: ignore[import-not-found]
    from testcontainers.mongodb import MongoDbContainer  # type: ignore[import-not-found]

    kafka = KafkaContainer(os.environ.get("SESSION_CORE_TC_KAFKA_IMAGE",
                                          "confluentinc/cp-kafka:7.6.0")).with_kraft()
    mongo = MongoDbContainer(os.environ.get("SESSION_CORE_TC_MONGO_IMAGE", "mongo:7.0"))
    kafka.start()
    try:
        mongo.start()
    except BaseException:
        kafka.stop()
        raise
    return Stack(bootstrap=kafka.get_bootstrap_server(), mongodb_uri=mongo.get_connection_url(),
                 kind="testcontainers", _closers=[mongo.stop, kafka.stop])


def _local_stack(state_dir: Path, private: bool = False) -> Stack:
    """``private``: Kafka and FerretDB of its own even when the environment names others
    (tests that kill the infrastructure must not kill a shared one)."""
    local = LocalStack.on_free_ports(
        state_dir, echo=False,
        external_kafka=None if private else os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None,
        external_mongo=None if private else os.environ.get("MONGODB_URI") or None)
    st = Stack(bootstrap=local.bootstrap, mongodb_uri=local.mongodb_uri, kind="local",
               state_dir=state_dir, kafka_port=local.kafka_port, mongo_port=local.mongo_port,
               controller_port=local.controller_port or 0, local=local)
    t0 = time.monotonic()
    try:
        st.up()
    except BaseException:
        with contextlib.suppress(Exception):
            st.down()
        raise
    sys.stderr.write(f"\n[stack] local stack ready in {time.monotonic() - t0:.1f}s "
                     f"(kafka {st.bootstrap}, store {st.mongodb_uri}, state {state_dir})\n")
    return st


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    kafka_env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    mongo_env = os.environ.get("MONGODB_URI")
    if kafka_env and mongo_env:
        yield Stack(bootstrap=kafka_env, mongodb_uri=mongo_env, kind="external")
        return
    if os.environ.get("SESSION_CORE_USE_TESTCONTAINERS") == "1" and _docker_reachable():
        st = _testcontainers_stack()
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
    st = _local_stack(state_dir)
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
        "http_host": "127.0.0.1",
        "http_port": free_port(),
        "health_port": 0,
    }
    return Settings(**values)

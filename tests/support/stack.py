"""Where a test run's infrastructure comes from (``tests/conftest.py`` picks one): the variables
that name an external Kafka and store, testcontainers, or the local stack
(``deploy.local.stack``) on free ports; and the handle tests use to take a component away."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.local.stack import Stack as LocalStack
from tests.support.skips import unavailable

REPO = Path(__file__).resolve().parents[2]
# the launcher's command line (run from REPO)
STACK_CLI = [sys.executable, "-m", "deploy.local.stack"]


@dataclass
class Stack:
    """Where the infrastructure is. ``kind`` is ``external``, ``testcontainers``, ``local``, or
    ``shared-local``: the local stack an xdist controller started for its workers (its state dir
    and ports are known; only the controller may stop it)."""

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
            unavailable(f"cannot stop {component} of a {self.kind} stack")
        self.local.stop(component, kill=kill)

    def start(self, component: str) -> None:
        """Start ``kafka`` or ``ferretdb`` again and wait until it is ready."""
        if self.local is None:
            unavailable(f"cannot start {component} of a {self.kind} stack")
        self.local.start(component)

    def up(self) -> None:
        assert self.local is not None
        self.local.up()

    def down(self) -> None:
        assert self.local is not None
        self.local.down()


def docker_reachable() -> bool:
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


def testcontainers_stack() -> Stack:  # pragma: no cover - needs a Docker engine
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


def local_stack(state_dir: Path, private: bool = False) -> Stack:
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

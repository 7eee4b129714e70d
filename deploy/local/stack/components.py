"""What the stack runs: Kafka (KRaft, one node), FerretDB (on SQLite, or on PostgreSQL with
``--store-backend postgresql``), the four services, the
reference and real Runtimes with the scripted model server, and extra commands — each a
``Component`` (command, environment, readiness check)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import postgres, probes
from .base import (
    REPO,
    StackError,
    ferretdb_version,
    free_port,
    harness_bin,
    http_ok,
    kafka_cluster_id,
    kafka_version,
    log,
    port_free,
)
from .install import harness_version, install_ferretdb, install_kafka, java_bin, run_logged
from .processes import Component, Proc, State

SERVICES = ("admission", "storage", "dispatcher", "receipts")
EXTRA_ENV = "SESSION_CORE_EXTRA_SERVICES"  # "name=command;name2=command2"
RUNTIME_HARNESSES = ("claude_code", "codex", "minimax_code")
# the real harness binaries (docs/harnesses.md): harness → cached executable name
REAL_HARNESSES = {"codex": "codex", "claude_code": "claude"}

KAFKA_PROPERTIES = """\
# written by deploy/local/stack (components.py) on every start; edit that, not this file
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={data}
# a small single-node test box
num.network.threads=2
num.io.threads=4
background.threads=4
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=168
log.segment.bytes=67108864
"""

KAFKA_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafkaRequest.name = kafka.request.logger
logger.kafkaRequest.level = WARN
logger.stateChange.name = state.change.logger
logger.stateChange.level = WARN
logger.controller.name = kafka.controller
logger.controller.level = WARN
logger.logcleaner.name = kafka.log.LogCleaner
logger.logcleaner.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


def _from_env(name: str) -> Callable[[], str | None]:
    return lambda: os.environ.get(name) or None


@dataclass
class Options:
    """One start of the stack. ``external_kafka`` / ``external_mongo``: infrastructure taken as
    given and not started (by default from ``KAFKA_BOOTSTRAP_SERVERS`` / ``MONGODB_URI``)."""

    state: State
    kafka_port: int = 9092
    controller_port: int | None = None
    mongo_port: int = 27017
    http_port: int = 8080
    venv: Path = REPO / ".venv"
    with_services: bool = False
    runtimes: bool = False
    demo: bool = False
    exit_after_demo: bool = False  # stop everything once the demo ended; its exit code (CI)
    extra: list[tuple[str, str]] = field(default_factory=list)
    only: list[str] = field(default_factory=list)
    foreground: bool = False
    external_kafka: str | None = field(default_factory=_from_env("KAFKA_BOOTSTRAP_SERVERS"))
    external_mongo: str | None = field(default_factory=_from_env("MONGODB_URI"))
    model_url: str = ""  # the scripted model server, once chosen (with runtimes)
    # FerretDB's backend: sqlite | postgresql (default: $SESSION_CORE_STORE_BACKEND, else sqlite)
    store_backend: str = field(default_factory=postgres.store_backend)


def bootstrap(opts: Options) -> str:
    return opts.external_kafka or f"127.0.0.1:{opts.kafka_port}"


def mongodb_uri(opts: Options) -> str:
    return opts.external_mongo or f"mongodb://127.0.0.1:{opts.mongo_port}/"


def pick_controller_port(stored: object, kafka_port: int, mongo_port: int,
                         is_free: Callable[[int], bool] = port_free,
                         fresh: Callable[[], int] = free_port) -> int:
    """The KRaft controller's port: the one stored with the data (kept across restarts), else
    the broker's + 1, else any free one — never the broker's or the store's own port (a state
    dir reused by a later run may hold, as controller port, the port picked for the broker)."""
    taken = {kafka_port, mongo_port}
    if isinstance(stored, int) and stored not in taken and is_free(stored):
        return stored
    if kafka_port + 1 not in taken and is_free(kafka_port + 1):
        return kafka_port + 1
    port = fresh()
    while port in taken:
        port = fresh()
    return port


def kafka_component(opts: Options) -> Component:
    libs = install_kafka()
    st = opts.state
    kdir = st.root / "kafka"
    data = kdir / "data"
    kdir.mkdir(parents=True, exist_ok=True)
    cport = opts.controller_port
    stored = st.data.get("kafka_controller_port")
    if cport is None:
        cport = pick_controller_port(stored, opts.kafka_port, opts.mongo_port)
    if (data / "meta.properties").exists() and stored != cport:
        log(f"kafka: controller port changed ({stored} -> {cport}); wiping {data} and reformatting")
        shutil.rmtree(data)
    props = kdir / "server.properties"
    props.write_text(KAFKA_PROPERTIES.format(port=opts.kafka_port, cport=cport, data=data))
    log4j = kdir / "log4j2.properties"
    log4j.write_text(KAFKA_LOG4J2)
    java = java_bin()
    jvm = ["-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
           "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={log4j}",
           f"-Dkafka.logs.dir={st.logs}", "-cp", f"{libs}/*"]
    if not (data / "meta.properties").exists():
        cluster_id = kafka_cluster_id()
        st.logs.mkdir(parents=True, exist_ok=True)
        fmt = [java, *jvm, "kafka.tools.StorageTool", "format", "--standalone",
               "-t", cluster_id, "-c", str(props)]
        what = "kafka: formatting KRaft storage (standalone controller)"
        try:
            run_logged(fmt, what=what)
        except StackError as exc:
            # a loaded machine can fail a format; formatting an empty data directory again is
            # harmless
            log(f"{exc}; wiping {data} and trying once more")
            shutil.rmtree(data, ignore_errors=True)
            time.sleep(2)
            run_logged(fmt, what=what)
        st.data["kafka_cluster_id"] = cluster_id
    st.data["kafka_controller_port"] = cport
    st.save()
    # every collection's pause, with wall-clock times, beside the broker's log (a stall of
    # the whole stack can be put beside the broker's pauses; two files of 10 MB at most; the
    # logs directory is made by ``start_process`` before the JVM opens the file)
    gc_log = [f"-Xlog:gc:file={st.logs / 'kafka-gc.log'}:time,uptime,level:"
              "filecount=2,filesize=10m"]
    return Component(
        name="kafka", kind="infra",
        cmd=[java, *jvm, *gc_log, "kafka.Kafka", str(props)], env={},
        ready=probes.kafka_ready("127.0.0.1", opts.kafka_port), ready_timeout=120,
        describe=f"Kafka {kafka_version()} (KRaft) on 127.0.0.1:{opts.kafka_port}"
                 f" (controller {cport})",
    )


def postgres_component(opts: Options) -> Component:
    cmd, port = postgres.prepare(opts.state)
    return Component(
        name="postgres", kind="infra", cmd=cmd, env={}, cwd=Path("/"),
        ready=lambda: postgres.ready(port), ready_timeout=60,
        describe=f"PostgreSQL ({postgres.pg_bin('postgres').parent.parent.name}) on"
                 f" 127.0.0.1:{port} for FerretDB",
    )


def ferretdb_component(opts: Options) -> Component:
    binary = install_ferretdb()
    cmd = [str(binary), "-listen", f"127.0.0.1:{opts.mongo_port}", "-log-level", "warn"]
    if opts.store_backend == "postgresql":
        port = opts.state.data.get("postgres_port")
        if not isinstance(port, int):
            raise StackError("ferretdb on postgresql: no PostgreSQL port in the state dir (start "
                             "postgres first)")
        cmd += ["-backend", "postgresql", "-postgresql-url", postgres.url(port)]
        what = f"PostgreSQL on 127.0.0.1:{port}"
    else:
        data = opts.state.root / "ferretdb" / "data"
        data.mkdir(parents=True, exist_ok=True)
        cmd += ["-sqlite-dir", str(data)]
        sync = os.environ.get("SESSION_CORE_SQLITE_SYNCHRONOUS")
        if sync:  # full (the wrapper's default) | extra | normal | off (docs/local-stack.md)
            cmd += ["-sqlite-synchronous", sync]
        poll = os.environ.get("SESSION_CORE_SQLITE_BUSY_POLL")
        if poll:  # the wrapper's busy handler's first pause, e.g. 100us; 0 = SQLite's own
            cmd += ["-sqlite-busy-poll", poll]
        what = "SQLite"
    pprof = os.environ.get("SESSION_CORE_FERRETDB_PPROF")
    if pprof:  # host:port for Go's /debug/pprof (docs/local-stack.md, profiling the store)
        cmd += ["-pprof-listen", pprof]
    return Component(
        name="ferretdb", kind="infra", cmd=cmd,
        env={}, ready=probes.mongo_ready("127.0.0.1", opts.mongo_port), ready_timeout=60,
        describe=f"FerretDB {ferretdb_version()} ({what}) on 127.0.0.1:{opts.mongo_port}",
    )


def auth_off() -> bool:
    return os.environ.get("SESSION_CORE_AUTH_DISABLED", "true").lower() in ("1", "true", "yes")


def local_api_key(opts: Options) -> str | None:
    """With auth on and no SESSION_CORE_API_KEYS of yours, the stack makes one local key for
    tenant "default" (kept in <state-dir>/api-key, mode 0600) and gives the services only its
    hashed entry (docs/security.md). None when auth is off or you set the keys yourself."""
    if auth_off() or os.environ.get("SESSION_CORE_API_KEYS"):
        return None
    f = opts.state.root / "api-key"
    if not f.exists():
        opts.state.root.mkdir(parents=True, exist_ok=True)
        f.write_text("sck_local_" + uuid.uuid4().hex + "\n")
        f.chmod(0o600)
    return f.read_text().strip()


def own_databases_env() -> dict[str, str]:
    """The receipt tracker and the dispatcher get a database of their own beside storage's
    (unless the environment names them): on FerretDB's SQLite backend a database is one file
    with one writer, and their writes would take turns with storage's commits
    (``shared.store.own_databases_env``, the same names; docs/storage.md, "A writer per
    database")."""
    base = os.environ.get("SESSION_CORE_MONGODB_DATABASE") or "session_core"
    return {name: os.environ.get(name) or f"{base}_{service}" for service, name in (
        ("receipts", "SESSION_CORE_MONGODB_RECEIPTS_DATABASE"),
        ("dispatcher", "SESSION_CORE_MONGODB_DISPATCHER_DATABASE"))}


def service_env(opts: Options) -> dict[str, str]:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap(opts),
        "MONGODB_URI": mongodb_uri(opts),
        "SESSION_CORE_HTTP_PORT": str(opts.http_port),
        "SESSION_CORE_HTTP_HOST": os.environ.get("SESSION_CORE_HTTP_HOST", "127.0.0.1"),
        "SESSION_CORE_AUTH_DISABLED": "true" if auth_off() else "false",
        "PYTHONUNBUFFERED": "1",
        **own_databases_env(),
    }
    key = local_api_key(opts) if opts.with_services else None
    if key is not None:
        # the same entry format as `session-core hash-key default <key>`
        env["SESSION_CORE_API_KEYS"] = "default:" + hashlib.sha256(key.encode()).hexdigest()
        env["SESSION_CORE_API_KEY"] = key  # for the demo and the CLI this stack starts
    if opts.model_url:  # the Runtimes, the services and the demo script the model through it
        env["SESSION_CORE_MODEL_SERVER"] = opts.model_url
    if opts.foreground:
        env.setdefault("SESSION_CORE_LOG_FORMAT", os.environ.get("SESSION_CORE_LOG_FORMAT",
                                                                 "console"))
    return env


def service_components(opts: Options) -> list[Component]:
    out: list[Component] = []
    if opts.with_services and opts.runtimes and not opts.model_url:
        opts.model_url = f"http://127.0.0.1:{free_port()}"
    env = service_env(opts)
    if opts.with_services:
        exe = opts.venv / "bin" / "session-core"
        if not exe.exists():
            raise StackError(f"{exe} not found: run `make venv` (and check that services/cli.py "
                             "exists)")
        for name in SERVICES:
            if name == "admission":
                url = f"http://127.0.0.1:{opts.http_port}"
                # the full /metrics (tenant samples too) on the metrics port (docs/security.md)
                hp = free_port()
                out.append(Component(name, [str(exe), name],
                                     {**env, "SESSION_CORE_HEALTH_PORT": str(hp)},
                                     probes.http_ready(url), 90, "service", REPO, url,
                                     f"admission HTTP API on {url} (metrics "
                                     f"http://127.0.0.1:{hp}/metrics)"))
            else:
                # each non-HTTP service gets its health server on a free port (/readyz)
                hp = free_port()
                url = f"http://127.0.0.1:{hp}"
                out.append(Component(name, [str(exe), name],
                                     {**env, "SESSION_CORE_HEALTH_PORT": str(hp)},
                                     probes.http_ready(url), 90, "service", REPO, url,
                                     f"session-core {name} (health {url}/readyz)"))
        if opts.runtimes:
            out += runtime_components(opts, exe, env)
    for name, command in opts.extra:
        out.append(Component(name, ["/bin/sh", "-c", command], env, lambda: True, 30,
                             "service", REPO, "", command, min_alive=2.0))
    return out


def harness_versions() -> None:
    """Print ``codex --version`` / ``claude --version`` (make run shows what it runs)."""
    for name in REAL_HARNESSES.values():
        exe = harness_bin(name)
        if not exe.exists():
            log(f"harness {name}: not installed ({exe}); run `python3 -m deploy.local.stack "
                "install`")
            continue
        log(f"harness {name} --version: {harness_version(name)}")


def real_harnesses() -> set[str]:
    """The harnesses whose pinned binary is installed (``install``): each gets a real Runtime."""
    return {h for h, b in REAL_HARNESSES.items() if harness_bin(b).exists()}


def runtime_components(opts: Options, exe: Path, env: dict[str, str]) -> list[Component]:
    """The scripted model server (a process), a real Runtime per real harness (``--engine
    real``, placements none and openai_hosted) and a simulated reference Runtime per harness
    (placement self_hosted, where the fault switches work; MiniMax Code — no real harness —
    everywhere)."""
    out: list[Component] = []
    model_url = opts.model_url
    model_port = model_url.rsplit(":", 1)[1]
    py = opts.venv / "bin" / "python"
    out.append(Component("modelserver", [str(py), "-m", "scripted_model", "--port",
                                         model_port], env,
                         lambda: http_ok(model_url + "/_requests"), 30, "service", REPO, model_url,
                         f"scripted model server {model_url} (Responses + Messages API)"))
    harness_versions()
    real = real_harnesses()
    for harness, binary in REAL_HARNESSES.items():
        if harness not in real:  # not installed: its simulated Runtime takes every placement
            continue
        base = model_url + ("/v1" if harness == "codex" else "")
        cmd = [str(exe), "runtime", "--harness", harness, "--engine", "real",
               "--model-base-url", base, "--placements", "none,openai_hosted"]
        out.append(Component(f"runtime-{harness}-real", cmd, env, lambda: True, 30, "service",
                             REPO, "", f"real Runtime ({harness}: {harness_bin(binary)})",
                             min_alive=2.0))
    for harness in RUNTIME_HARNESSES:
        placements = "self_hosted" if harness in real else "none,openai_hosted,self_hosted"
        cmd = [str(exe), "runtime", "--harness", harness, "--placements", placements]
        out.append(Component(f"runtime-{harness}", cmd, env, lambda: True, 30, "service", REPO,
                             "", f"reference Runtime ({harness}, simulated: {placements})",
                             min_alive=2.0))
    return out


def run_demo(opts: Options) -> int:
    """``session-core demo`` against the running system (make run's scripted tour); its exit
    code."""
    env = {**os.environ, **service_env(opts),
           "SESSION_CORE_API": f"http://127.0.0.1:{opts.http_port}"}
    log("running the demo (session-core demo) — service logs follow it")
    rc = subprocess.call([str(opts.venv / "bin" / "session-core"), "demo"], env=env,
                         cwd=REPO, stdin=subprocess.DEVNULL)
    if rc != 0:
        log(f"the demo ended with exit code {rc}" + (
            "" if opts.exit_after_demo else "; the system keeps running"))
    return rc


def parse_extra(values: Sequence[str]) -> list[tuple[str, str]]:
    items: list[str] = []
    if os.environ.get(EXTRA_ENV):
        items += [x for x in os.environ[EXTRA_ENV].split(";") if x.strip()]
    items += list(values)
    out = []
    for item in items:
        name, sep, command = item.partition("=")
        name = name.strip()
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not command.strip():
            raise StackError(f"bad extra service {item!r}: expected NAME=COMMAND")
        out.append((name, command.strip()))
    return out


def infra_plan(opts: Options) -> list[tuple[str, Callable[[], Component]]]:
    """Infrastructure factories in start order (stop order is the reverse)."""
    plan: list[tuple[str, Callable[[], Component]]] = []
    if not opts.external_kafka:
        plan.append(("kafka", lambda: kafka_component(opts)))
    if not opts.external_mongo:
        if opts.store_backend == "postgresql":
            plan.append(("postgres", lambda: postgres_component(opts)))
        plan.append(("ferretdb", lambda: ferretdb_component(opts)))
    return plan


def ready_check(name: str, opts: Options, proc: Proc | None = None) -> Callable[[], bool]:
    """Readiness of a running process (``status``, ``already running``)."""
    if proc is not None and proc.url:
        if name == "modelserver":  # no /readyz: it answers its request log
            return lambda: http_ok(proc.url + "/_requests")
        return probes.http_ready(proc.url)
    if name == "kafka":
        return probes.kafka_ready("127.0.0.1", opts.kafka_port)
    if name == "ferretdb":
        return probes.mongo_ready("127.0.0.1", opts.mongo_port)
    if name == "postgres":
        port = opts.state.data.get("postgres_port")
        return lambda: isinstance(port, int) and postgres.ready(port)
    if name == "admission":
        return probes.http_ready(f"http://127.0.0.1:{opts.http_port}")
    return lambda: True

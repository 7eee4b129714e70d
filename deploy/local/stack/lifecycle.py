"""Bring the stack up and down: ``start_all`` (infrastructure first, then services, each phase
started at once and then waited for), ``stop`` (services first), ``status``, the banner — and
``Stack``, the Python API the tests and the benchmarks use."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from .base import REPO, StackError, free_ports, log, log_to, port_free
from .components import (
    Options,
    auth_off,
    bootstrap,
    infra_plan,
    local_api_key,
    mongodb_uri,
    ready_check,
    service_components,
)
from .postgres import store_backend
from .processes import Component, Proc, State, start_process, stop_in_order, stop_many, wait_ready


def _const(comp: Component) -> Callable[[], Component]:
    return lambda: comp


def _check_port(name: str, port: int) -> None:
    if not port_free(port):
        raise StackError(f"{name}: port {port} on 127.0.0.1 is taken by a process this state dir "
                         "did not start; stop it or pick another port")


def start_all(opts: Options) -> list[Proc]:
    """Start what is not running yet, in two phases (infrastructure, then services); within a
    phase everything starts at once and then each is waited for. Returns all our processes."""
    st = opts.state.load()
    infra = infra_plan(opts)
    services: list[tuple[str, Callable[[], Component]]] = []
    if opts.with_services or opts.extra:
        services = [(c.name, _const(c)) for c in service_components(opts)]
    ports = {"kafka": opts.kafka_port, "ferretdb": opts.mongo_port}
    if opts.with_services:
        ports["admission"] = opts.http_port
    procs: list[Proc] = []
    new: list[Proc] = []
    for name, _ in infra + services:  # refuse before starting anything
        running = st.proc(name)
        if (not opts.only or name in opts.only) and name in ports and not (
                running and running.alive()):
            _check_port(name, ports[name])
    t0 = time.monotonic()
    try:
        for phase in (infra, services):
            waiting: list[tuple[Component, Proc]] = []
            for name, factory in phase:
                if opts.only and name not in opts.only:
                    continue
                running = st.proc(name)
                if running and running.alive():
                    ready = ready_check(name, opts, running)()
                    log(f"{name}: already running (pid {running.pid})"
                        f"{'' if ready else ', NOT ready'}")
                    procs.append(running)
                    continue
                if running:
                    stop_many(st, [running], 5)  # stale group members, if any
                comp = factory()
                proc = start_process(st, comp)
                log(f"{name}: started pid {proc.pid}, log {proc.log}")
                procs.append(proc)
                new.append(proc)
                waiting.append((comp, proc))
            for comp, proc in waiting:
                wait_ready(comp, proc, t0)
    except BaseException:
        log("start-up failed; stopping what this command started")
        stop_in_order(st, new, 20)
        raise
    log(f"stack ready in {time.monotonic() - t0:.1f}s")
    return procs


def stop(state: State, only: Sequence[str] = (), timeout: float = 30.0,
         first: signal.Signals = signal.SIGTERM) -> None:
    procs = state.procs()
    if only:
        procs = [p for p in procs if p.name in only]
    if not procs:
        log(f"nothing running for {state.root}")
        return
    stop_in_order(state, procs, timeout, first)


def status(opts: Options) -> list[tuple[Proc, bool, bool]]:
    """(process, alive, ready) for everything started from the state dir."""
    opts.state.load()
    out = []
    for p in opts.state.procs():
        alive = p.alive()
        out.append((p, alive, alive and ready_check(p.name, opts, p)()))
    return out


def print_banner(opts: Options) -> None:
    ext_k = "  (external)" if opts.external_kafka else ""
    ext_m = "  (external)" if opts.external_mongo else ""
    print()
    print(f"  Kafka bootstrap : {bootstrap(opts)}{ext_k}")
    print(f"  MongoDB URI     : {mongodb_uri(opts)}{ext_m}")
    print(f"  state dir       : {opts.state.root}  (logs in {opts.state.logs})")
    if opts.with_services:
        url = f"http://127.0.0.1:{opts.http_port}"
        print(f"  API             : {url}   (readiness: curl -fsS {url}/readyz)")
        key = local_api_key(opts)
        if auth_off():
            print("  auth            : OFF (SESSION_CORE_AUTH_DISABLED=true, local use only) —"
                  " no Authorization header needed, e.g.")
            print(f"                    curl -fsS {url}/healthz")
        elif key is not None:
            print(f"  auth            : ON — local key of tenant 'default' (in "
                  f"{opts.state.root / 'api-key'}):")
            print(f"                    export SESSION_CORE_API_KEY={key}")
            print(f"                    curl -fsS -H \"Authorization: Bearer {key}\" "
                  f"{url}/v1/sessions/<session_id>")
        else:
            print("  auth            : ON — send 'Authorization: Bearer <key>' with a key whose"
                  " entry is in your SESSION_CORE_API_KEYS")
            print("                    (tenant:sha256hex entries; make one with"
                  " `session-core hash-key <tenant>`)")
    print(f"  environment     : export KAFKA_BOOTSTRAP_SERVERS={bootstrap(opts)}"
          f" MONGODB_URI={mongodb_uri(opts)}")
    print()


@dataclass
class Stack:
    """A local stack under ``state_dir``, in this process: ``up()`` starts what is not running
    and waits until it is ready, ``down()`` stops everything started from ``state_dir`` (other
    processes, e.g. ``python -m deploy.local.stack down``, can stop it too). ``external_kafka`` /
    ``external_mongo`` name infrastructure to use instead of starting it (default: start both,
    whatever the environment says). ``echo=False`` keeps the ``[stack]`` lines in ``output``
    (and in the message of a failed start) instead of printing them."""

    state_dir: Path
    kafka_port: int = 9092
    mongo_port: int = 27017
    controller_port: int | None = None
    http_port: int = 8080
    with_services: bool = False
    runtimes: bool = False
    extra: list[tuple[str, str]] = field(default_factory=list)
    external_kafka: str | None = None
    external_mongo: str | None = None
    venv: Path = REPO / ".venv"
    store_backend: str | None = None  # sqlite | postgresql; None: $SESSION_CORE_STORE_BACKEND
    echo: bool = True
    output: list[str] = field(default_factory=list, repr=False)

    @classmethod
    def on_free_ports(cls, state_dir: Path, **kwargs: object) -> Stack:
        """Kafka, its controller and the store on ports the OS has just handed out."""
        kafka, mongo, controller = free_ports(3)
        return cls(Path(state_dir), kafka_port=kafka, mongo_port=mongo,
                   controller_port=controller, **kwargs)  # type: ignore[arg-type]

    def options(self, only: Sequence[str] = ()) -> Options:
        return Options(state=State(Path(self.state_dir).expanduser().resolve()),
                       kafka_port=self.kafka_port, controller_port=self.controller_port,
                       mongo_port=self.mongo_port, http_port=self.http_port, venv=self.venv,
                       with_services=self.with_services, runtimes=self.runtimes,
                       extra=list(self.extra), only=list(only),
                       external_kafka=self.external_kafka, external_mongo=self.external_mongo,
                       store_backend=store_backend(self.store_backend))

    @property
    def bootstrap(self) -> str:
        return bootstrap(self.options())

    @property
    def mongodb_uri(self) -> str:
        return mongodb_uri(self.options())

    def env(self) -> dict[str, str]:
        """The environment that points a client at this stack."""
        return {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap, "MONGODB_URI": self.mongodb_uri}

    def up(self, only: Sequence[str] = ()) -> list[Proc]:
        """Start (``only``: just these components) and wait until ready."""
        if self.echo:
            return start_all(self.options(only))
        mark = len(self.output)
        try:
            with log_to(self.output.append):
                return start_all(self.options(only))
        except StackError as exc:
            raise StackError(f"{exc}\n{''.join(self.output[mark:])[-6000:]}") from exc

    def down(self, only: Sequence[str] = (), kill: bool = False, timeout: float = 30.0) -> None:
        """Stop (``only``: just these); ``kill``: SIGKILL at once, as a crash would."""
        first = signal.SIGKILL if kill else signal.SIGTERM
        if self.echo:
            stop(self.options().state, only, timeout, first)
            return
        with log_to(self.output.append):
            stop(self.options().state, only, timeout, first)

    def stop(self, component: str, kill: bool = False) -> None:
        self.down([component], kill=kill)

    def start(self, component: str) -> None:
        self.up([component])

    def status(self) -> list[tuple[Proc, bool, bool]]:
        return status(self.options())

    def ready(self) -> bool:
        """Everything started from the state dir is running and ready."""
        rows = self.status()
        return bool(rows) and all(alive and ready for _, alive, ready in rows)

    def __enter__(self) -> Stack:
        self.up()  # a failed start stops what it started
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()


__all__ = ["Stack", "print_banner", "start_all", "status", "stop"]

"""Local real stack for Session Core: Apache Kafka (KRaft, one node) + FerretDB (SQLite backend)
and, optionally, the four services. No Docker.

    python3 -m deploy.local.stack install              # fetch Kafka jars, build FerretDB (cached)
    python3 -m deploy.local.stack venv                 # the project's venv outside the repo
    .venv/bin/python -m deploy.local.stack up [--with-services]  # start in the background, wait
    .venv/bin/python -m deploy.local.stack status
    python3 -m deploy.local.stack down                 # SIGTERM by PID/process group, then SIGKILL
    .venv/bin/python -m deploy.local.stack run [--with-services]  # foreground; Ctrl-C stops all

Run from the repository root. ``install``, ``venv``, ``down`` and ``env`` need only the standard
library; ``up``, ``run`` and ``status`` probe readiness with aiokafka and PyMongo, so they run
with the venv's python. Downloads and builds live in ``$SESSION_CORE_CACHE`` (default
``~/.cache/session-core``); data, logs and PID files in the state directory (``--state-dir``,
default ``~/.cache/session-core/state/default``). If ``KAFKA_BOOTSTRAP_SERVERS`` /
``MONGODB_URI`` are set, that part of the infrastructure is taken as given and not started.
See docs/local-stack.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import lifecycle, probes
from .base import INFRA, REPO, StackError, cache_dir, log, write
from .components import EXTRA_ENV, Options, bootstrap, mongodb_uri, parse_extra, run_demo
from .install import install_all, install_venv
from .postgres import BACKENDS, store_backend
from .processes import Proc, State, stop_in_order


def make_options(args: argparse.Namespace, foreground: bool = False) -> Options:
    return Options(
        state=State(Path(args.state_dir).expanduser().resolve()),
        kafka_port=args.kafka_port,
        controller_port=args.kafka_controller_port,
        mongo_port=args.mongo_port,
        http_port=args.http_port,
        venv=Path(args.venv).expanduser(),
        with_services=bool(getattr(args, "with_services", False)),
        runtimes=bool(getattr(args, "runtimes", False)),
        demo=bool(getattr(args, "demo", False)),
        exit_after_demo=bool(getattr(args, "exit_after_demo", False)),
        extra=parse_extra(getattr(args, "extra", None) or []),
        only=list(getattr(args, "only", None) or []),
        foreground=foreground,
        store_backend=store_backend(getattr(args, "store_backend", None)),
    )


def cmd_install(_: argparse.Namespace) -> int:
    install_all()
    return 0


def cmd_venv(args: argparse.Namespace) -> int:
    install_venv(args.python, link=not args.no_link)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    opts = make_options(args)
    if opts.external_kafka and opts.external_mongo and not (opts.with_services or opts.extra):
        log("KAFKA_BOOTSTRAP_SERVERS and MONGODB_URI are set: starting no infrastructure")
    lifecycle.start_all(opts)
    lifecycle.print_banner(opts)
    log(f"stop with: python3 -m deploy.local.stack down --state-dir {opts.state.root}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    lifecycle.stop(State(Path(args.state_dir).expanduser().resolve()), args.only or (),
                   args.timeout, signal.SIGKILL if args.kill else signal.SIGTERM)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    opts = make_options(args)
    rows = lifecycle.status(opts)
    if not rows:
        log(f"nothing started from {opts.state.root}")
        return 3
    for p, alive, ready in rows:
        print(f"  {p.name:<12} pid {p.pid:<8} {'running' if alive else 'DEAD':<8}"
              f" {'ready' if ready else 'not ready':<10} log {p.log}")
    return 0 if all(ready for _, _, ready in rows) else 1


def cmd_env(args: argparse.Namespace) -> int:
    opts = make_options(args)
    print(f"export KAFKA_BOOTSTRAP_SERVERS={bootstrap(opts)}")
    print(f"export MONGODB_URI={mongodb_uri(opts)}")
    return 0


def _follow(procs: Sequence[Proc], stop: threading.Event) -> None:
    """Interleave the services' logs on the terminal, each line prefixed with the name."""
    handles = {}
    for p in procs:
        f = open(p.log, errors="replace")  # closed below
        f.seek(p.log_offset)
        handles[p.name] = f
    width = max((len(n) for n in handles), default=5)
    try:
        while not stop.is_set():
            idle = True
            for name, f in handles.items():
                for line in iter(f.readline, ""):
                    idle = False
                    write(f"{name:>{width}} | {line.rstrip(chr(10))}\n")
            if idle:
                stop.wait(0.2)
    finally:
        for f in handles.values():
            f.close()


def cmd_run(args: argparse.Namespace) -> int:
    opts = make_options(args, foreground=True)
    st = opts.state
    stop = threading.Event()

    def on_term(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)
    procs: list[Proc] = []
    follower = None
    return_code = 0
    try:
        procs = lifecycle.start_all(opts)
        lifecycle.print_banner(opts)
        if opts.demo and opts.with_services:
            return_code = run_demo(opts)
            if opts.exit_after_demo:
                log(f"the demo ended (exit code {return_code}); stopping")
                return return_code  # the finally block stops everything
        svc = [p for p in procs if p.name not in INFRA]
        if svc:
            follower = threading.Thread(target=_follow, args=(svc, stop), daemon=True)
            follower.start()
        infra = [p.log for p in procs if p.name in INFRA]
        if infra:
            log("infrastructure logs: " + ", ".join(infra))
        log("running in the foreground; Ctrl-C stops everything")
        reported: set[str] = set()
        while True:
            for p in procs:
                if p.name not in reported and not p.alive():
                    reported.add(p.name)
                    log(f"{p.name} (pid {p.pid}) exited; see {p.log}")
                    if p.name in INFRA:
                        raise StackError(f"{p.name} died; stopping")
            time.sleep(0.5)
    except KeyboardInterrupt:
        write("\n")
        log("stopping")
    except StackError as e:
        log(str(e))
        return_code = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not abort the clean-up
        stop.set()
        if follower:
            follower.join(timeout=2)
        mine = {q.name for q in procs}
        stop_in_order(st, [p for p in st.procs() if p.name in mine], 20)
    return return_code


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m deploy.local.stack", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--state-dir", default=str(cache_dir() / "state" / "default"),
                       help="data, logs and PID files (default: %(default)s)")
        p.add_argument("--kafka-port", type=int, default=9092)
        p.add_argument("--kafka-controller-port", type=int, default=None,
                       help="KRaft controller listener (default: remembered, else kafka-port+1,"
                            " else any free port)")
        p.add_argument("--mongo-port", type=int, default=27017)
        p.add_argument("--http-port", type=int,
                       default=int(os.environ.get("SESSION_CORE_HTTP_PORT", "8080")),
                       help="admission HTTP port (default: $SESSION_CORE_HTTP_PORT or 8080)")
        p.add_argument("--venv", default=str(REPO / ".venv"),
                       help="venv holding the session-core command (default: %(default)s)")

    def starting(p: argparse.ArgumentParser) -> None:
        common(p)
        p.add_argument("--with-services", action="store_true",
                       help="also start session-core admission|storage|dispatcher|receipts")
        p.add_argument("--runtimes", action="store_true",
                       help="with --with-services: also one reference Runtime per harness")
        p.add_argument("--extra", action="append", metavar="NAME=COMMAND",
                       help=f"also start this command (repeatable; or ${EXTRA_ENV}="
                            "'name=cmd;name2=cmd2')")
        p.add_argument("--only", action="append", metavar="NAME",
                       help="start only this component (kafka, postgres, ferretdb, a service);"
                            " repeatable")
        p.add_argument("--store-backend", choices=BACKENDS, default=None,
                       help="FerretDB's backend (default: $SESSION_CORE_STORE_BACKEND, else"
                            " sqlite; postgresql also runs a PostgreSQL server,"
                            " docs/local-stack.md)")

    def command(name: str, func: Callable[[argparse.Namespace], int], about: str,
                args: Callable[[argparse.ArgumentParser], None] | None = common,
                ) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=about)
        if args is not None:
            args(p)
        p.set_defaults(func=func)
        return p

    command("install", cmd_install, "fetch Kafka jars and build FerretDB (cached, idempotent)",
            None)
    p = command("venv", cmd_venv,
                "create/reuse the venv (from requirements/dev.lock) outside the repo, link .venv",
                None)
    p.add_argument("--python", default=None, help="base interpreter (default: python3.11)")
    p.add_argument("--no-link", action="store_true",
                   help="leave .venv alone (make fresh-check builds one in a temporary cache)")
    command("up", cmd_up, "start in the background and wait until ready", starting)
    p = command("run", cmd_run, "start in the foreground; Ctrl-C stops everything", starting)
    p.add_argument("--demo", action="store_true",
                   help="once ready, play the scripted demo (session-core demo)")
    p.add_argument("--exit-after-demo", action="store_true",
                   help="with --demo: then stop everything and exit with the demo's exit code")
    p = command("down", cmd_down, "stop everything started from this state dir")
    p.add_argument("--only", action="append", metavar="NAME", help="stop only this component")
    p.add_argument("--kill", action="store_true",
                   help="SIGKILL at once, no graceful stop (crash tests: kill -9)")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds between SIGTERM and SIGKILL")
    command("status", cmd_status, "what runs from this state dir, and whether it is ready")
    command("env", cmd_env, "print the environment that points at this stack")
    return ap


PROBING = ("up", "run", "status")


def _in_the_venv(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """``up``, ``run`` and ``status`` probe with aiokafka and PyMongo: started by an interpreter
    without them (``python3 -m deploy.local.stack up``), run again with the venv's python."""
    if args.command not in PROBING or probes.clients_installed():
        return
    venv = Path(args.venv).expanduser()
    py = venv / "bin" / "python"
    if not py.exists() or Path(sys.prefix).resolve() == venv.resolve():
        return  # the probe reports what is missing
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    os.execve(py, [str(py), "-m", "deploy.local.stack", *argv], env)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    _in_the_venv(args, argv)
    probes.quiet_client_logs()
    try:
        rc: int = args.func(args)
    except StackError as e:
        log(f"error: {e}")
        return 1
    return rc

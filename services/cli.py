"""``session-core <command>``: one entry point for every process of the project (the server
distribution). A service's command runs its package's ``__main__`` (``python -m
services.<name>`` is the same process), ``runtime`` the Runtime's (``python -m runtimes``). The
user CLI is ``session-core-cli`` (``session_core_client.cli``, docs/cli.md).

``--help`` of every command and ``hash-key`` need only the standard library; the rest needs the
server extras (``pip install 'session-core[server]'``) and says so when they are missing."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib import import_module

SERVICES = ("admission", "storage", "dispatcher", "receipts")


async def _topics(argv: list[str]) -> int:
    """``session-core topics [create | check]``: the topics as declared state. ``create`` (the
    default, what the chart's Job runs) creates the missing topics, alters the configs that
    differ (retention.ms, min.insync.replicas, max.message.bytes, cleanup.policy) and fails on
    what Kafka cannot change in place (partition counts, replication factors); ``check``
    changes nothing and fails on any difference. docs/deploy.md, "Topics"."""
    from shared.kafka import TopicsDrift, ensure_topics
    from shared.settings import get_settings
    from shared.topics import topics_for

    p = argparse.ArgumentParser(prog="session-core topics", description=_topics.__doc__)
    p.add_argument("action", nargs="?", choices=["create", "check"], default="create")
    args = p.parse_args(argv)
    s = get_settings().model_copy(update={"create_topics": True})
    if args.action == "check":
        from shared.kafka import plan_existing

        plan = await plan_existing(s, topics_for(s))
        for d in plan.create:
            print(f"missing: {d.name}", file=sys.stderr)
        for name, changed in plan.alter.items():
            print(f"configs differ: {name} {changed}", file=sys.stderr)
        for err in plan.errors:
            print(f"cannot change in place: {err}", file=sys.stderr)
        if plan.create or plan.alter or plan.errors:
            return 1
        print("topics: as declared")
        return 0
    try:
        await ensure_topics(s, topics_for(s), strict=True)
    except TopicsDrift as exc:
        print(f"session-core topics: the topics differ from the declared ones in what Kafka "
              f"cannot change in place; nothing of that was changed:\n{exc}", file=sys.stderr)
        return 1
    print("topics: as declared")
    return 0


def hash_key(argv: list[str]) -> int:
    """``session-core hash-key <tenant> [<key> | -]``: print the ``api_keys`` entry of a key
    (``-`` reads it from stdin, out of the shell history). Without a key, a new one is made and
    shown once on stderr; stdout carries only the entry, so ``$(session-core hash-key t)`` is
    the entry. docs/security.md."""
    from shared.domain.tenancy import key_entry, new_key

    p = argparse.ArgumentParser(prog="session-core hash-key", description=hash_key.__doc__)
    p.add_argument("tenant", help="tenant name: letters, digits, '_', '.', '-' (up to 64)")
    p.add_argument("key", nargs="?", help="the bearer key; '-' = read it from stdin; "
                   "omitted = generate one")
    args = p.parse_args(argv)
    key = args.key
    if key == "-":
        key = sys.stdin.readline().rstrip("\r\n")
    generated = key is None
    if generated:
        key = new_key()
    try:
        entry = key_entry(args.tenant, key)
    except ValueError as exc:
        print(f"session-core hash-key: {exc}", file=sys.stderr)
        return 2
    if generated:
        print(f"new API key for tenant {args.tenant} (shown once, give it to the tenant): {key}",
              file=sys.stderr)
    print(entry)
    return 0


def seal_key(argv: list[str]) -> int:
    """``session-core seal-key``: print a new X25519 private key for ``SESSION_CORE_SEAL_KEY``
    (the dispatcher's and the receipt tracker's Secret) on stdout, its public key on stderr.
    docs/security.md, "Sealed deliveries"."""
    p = argparse.ArgumentParser(prog="session-core seal-key", description=seal_key.__doc__)
    p.parse_args(argv)
    from shared.sealing import KeyPair

    keys = KeyPair.generate()
    print(f"public key (for reference): {keys.public}", file=sys.stderr)
    print(keys.private_text)
    return 0


COMMANDS: dict[str, str] = {
    "admission": "run the admission service (HTTP API + session.input)",
    "storage": "run the storage service",
    "dispatcher": "run the dispatcher service",
    "receipts": "run the receipt tracker",
    "topics": "make the topics as declared ('create', the default) or only compare ('check')",
    "runtime": "run a Runtime (the reference Runtime or a real harness)",
    "conformance": "the Runtime qualification kit",
    "demo": "play the demo against a running stack",
    "hash-key": "make an API key entry",
    "seal-key": "make Core's key for sealed deliveries",
}
# commands whose own module parses the rest of the command line (``--help`` included)
OWN_PARSER = ("topics", "runtime", "conformance", "hash-key", "seal-key")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("session-core")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="session-core", description=__doc__,
        epilog="`session-core COMMAND --help` describes a command without running it. Exit "
        "codes: 0 success, 1 failure, 2 usage error or an unreachable dependency.")
    parser.add_argument("--version", action="version", version=f"session-core {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, help_ in COMMANDS.items():
        sub.add_parser(name, help=help_, add_help=name not in OWN_PARSER, description=help_)
    args, rest = parser.parse_known_args(argv[:1])
    rest = argv[1:]
    if args.command not in OWN_PARSER:
        # the command takes no arguments: --help answers here, anything else is a usage error
        sub.choices[args.command].parse_args(rest)
    if args.command == "hash-key":  # the standard library only: works on any install
        sys.exit(hash_key(rest))
    if args.command == "seal-key":
        sys.exit(seal_key(rest))
    try:
        from shared import eventloop
        from shared.process import begin
    except ModuleNotFoundError as exc:
        sys.exit(f"session-core {args.command}: {exc.name} is not installed; the services need "
                 "the server extras: pip install 'session-core[server]'")
    if args.command in SERVICES:  # each service's own ``__main__`` starts it
        service: Callable[[], None] = import_module(f"services.{args.command}.__main__").main
        service()
        return
    if args.command == "runtime":  # so does the Runtime's
        from runtimes.main import main as runtime_main

        runtime_main(rest)
        return
    settings = begin(args.command)
    if args.command == "topics":
        sys.exit(eventloop.run(_topics(rest), settings.event_loop))
    elif args.command == "demo":
        from demo.tour import main as demo_main

        demo_main(rest)
    else:
        from runtimes.conformance import main as conf_main

        conf_main(rest)


if __name__ == "__main__":
    main()

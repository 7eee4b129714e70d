"""``session-core-cli``: drive Session Core as a user (docs/cli.md).

A thin layer over the client library ``session_core_client``: speaks only the public HTTP API
(``--api``, ``--api-key``; env ``SESSION_CORE_API`` / ``SESSION_CORE_API_KEY``), ``tail`` included
(it follows ``GET …/items?stream=true``, so no Kafka credentials are needed). Idempotency ids are
minted when not given, and 429 / 503 / 504 answers and connection errors are retried (honouring
Retry-After), so a retried command never double-posts. Every command prints readable lines;
``--json`` prints the raw answer instead, and errors as JSON too. Exit codes: 0 success, 1 an
error answer (4xx/5xx), a wait that ran out or a ``tail --until-turn-end`` that timed out first,
2 a usage error or an unreachable API, 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx

import session_core_client
from session_core_client import ApiError, Client, TransportError, core
from session_core_client.cli import render
from session_core_client.cli.bodies import (
    UsageError,
    create_body,
    message_event_body,
    tool_result_body,
)
from session_core_client.core import SseParser

Json = dict[str, Any]
DEFAULT_API = "http://127.0.0.1:8080"
TERMINAL_TURN_STATES = ("completed", "failed")


class Exit(Exception):
    def __init__(self, code: int, message: str | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.body = body  # printed as JSON with --json


# --------------------------------------------------------------------------- arguments


class _PartAction(argparse.Action):
    """``--text`` / ``--image`` / ``--next-message`` append to one ordered list, so the parts
    keep their command-line order."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        parts = list(getattr(namespace, self.dest, None) or [])
        parts.append((str(self.const), values if isinstance(values, str) else None))
        setattr(namespace, self.dest, parts)


def _add_parts(p: argparse.ArgumentParser, dest: str = "parts") -> None:
    p.add_argument("--text", dest=dest, action=_PartAction, const="text", metavar="TEXT",
                   help="a text part (repeatable; parts keep their order)")
    p.add_argument("--image", dest=dest, action=_PartAction, const="image", metavar="FILE",
                   help="a PNG or JPEG file, sent as a data URI (repeatable)")
    p.add_argument("--next-message", dest=dest, action=_PartAction, const="break", nargs=0,
                   help="start a new message; later parts go into it")


def _add_envelope(p: argparse.ArgumentParser) -> None:
    p.add_argument("--metadata", type=json.loads, metavar="JSON",
                   help="a JSON object stored with the input and echoed on its Items")
    p.add_argument("--tag", dest="tags", action="append", default=[], metavar="TAG",
                   help="a tag (repeatable)")
    p.add_argument("--actor", metavar="SOURCE:ACTOR_ID[:NAME]",
                   help="external_actor, e.g. slack:U0123456789:Alice")


def _add_wait(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wait", action="store_true",
                   help="answer when the Turn ends (?wait=true), printing its Items")
    p.add_argument("--timeout-ms", type=int, default=120_000,
                   help="with --wait: the budget in ms (≥ 1; default 120000; the server "
                        "caps it at 600000)")


def _common(p: argparse.ArgumentParser, suppress: bool) -> None:
    def d(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    p.add_argument("--api", default=d(os.environ.get("SESSION_CORE_API", DEFAULT_API)),
                   help="base URL of the HTTP API (env SESSION_CORE_API)")
    p.add_argument("--api-key", default=d(os.environ.get("SESSION_CORE_API_KEY")),
                   help="bearer API key (env SESSION_CORE_API_KEY)")
    p.add_argument("--json", action="store_true", default=d(False),
                   help="print the raw JSON answer")
    p.add_argument("--http-timeout", type=float, default=d(30.0), help=argparse.SUPPRESS)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="session-core-cli", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"session-core-cli {session_core_client.__version__}")
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def cmd(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        _common(p, suppress=True)
        return p

    p = cmd("create", "create a Session from text and image files")
    p.add_argument("--harness", required=True, choices=("codex", "claude_code", "minimax_code"))
    p.add_argument("--placement", default="none",
                   choices=("none", "openai_hosted", "self_hosted"))
    _add_parts(p)
    p.add_argument("--string-input", action="store_true",
                   help="send a single --text as the string form of input")
    p.add_argument("--stream", action="store_true",
                   help="stream: true — print Items as they are published until the first "
                   "Turn ends (with --follow: until Ctrl-C)")
    p.add_argument("--follow", action="store_true", help="with --stream: keep streaming")
    p.add_argument("--client-request-id", help="idempotency id (a repeat returns the Session)")
    _add_envelope(p)
    _add_wait(p)

    p = cmd("send", "send a message event")
    p.add_argument("session")
    _add_parts(p)
    p.add_argument("--client-event-id")
    _add_envelope(p)
    _add_wait(p)

    p = cmd("result", "submit a function result")
    p.add_argument("session")
    p.add_argument("call_id")
    ok = p.add_mutually_exclusive_group(required=True)
    ok.add_argument("--success", dest="success", action="store_true")
    ok.add_argument("--failure", dest="success", action="store_false")
    p.add_argument("--output", dest="output", action=_PartAction, const="text", metavar="TEXT",
                   help="an output text (one alone is sent as a string)")
    p.add_argument("--output-image", dest="output", action=_PartAction, const="image",
                   metavar="FILE", help="an output image part (PNG/JPEG file)")
    p.add_argument("--output-parts", action="store_true",
                   help="send even a single --output as an array of parts")
    p.add_argument("--error", help="the error text")
    p.add_argument("--client-event-id")
    _add_envelope(p)
    _add_wait(p)

    p = cmd("items", "list a Session's Items (recovery read)")
    p.add_argument("session")
    p.add_argument("--after", type=int, default=0)
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--all", action="store_true", help="follow has_more to the end")

    p = cmd("tail", "print a Session's Items; --follow keeps printing them as they are "
            "published (GET …/items?stream=true, resumed after a dropped connection)")
    p.add_argument("session")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new Items")
    p.add_argument("--after", type=int, default=0, help="skip Items up to this sequence")
    p.add_argument("--until-turn-end", action="store_true",
                   help="with --follow: stop at the first Turn Item (after --after) that completes "
                   "or fails (exit 1 if a timeout ends the tail first)")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="with --follow: stop after S seconds in all")
    p.add_argument("--idle-timeout", type=float, default=None, metavar="S",
                   help="with --follow: stop after S seconds without a new Item (the server's "
                   "keep-alives do not count)")

    p = cmd("call", "show a function call, its stored submission and application state")
    p.add_argument("session")
    p.add_argument("call_id")

    p = cmd("session", "show a Session")
    p.add_argument("session")
    return parser


# --------------------------------------------------------------------------- HTTP


class Api:
    """The CLI's view of the client library: status and body of every answer (the CLI prints
    error answers itself), ``Exit(2)`` when the API cannot be reached."""

    def __init__(self, base: str, key: str | None, timeout: float = 30.0) -> None:
        self.client = Client(base, key, timeout_s=timeout)
        self.base = base

    def call(self, method: str, path: str, body: Json | None = None,
             params: Json | None = None) -> tuple[int, Any]:
        try:
            return self.client.call(method, path, body=body, params=params)
        except TransportError as exc:
            raise Exit(2, str(exc)) from None

    @contextlib.contextmanager
    def stream(self, path: str, body: Json) -> Iterator[httpx.Response]:
        try:
            # an SSE answer: the server's keep-alives arrive every 15 s, so only a connection
            # silent for core.STREAM_READ_TIMEOUT_S is dead
            with self.client.http.stream("POST", path, json=body,
                                         headers={"Accept": "text/event-stream"},
                                         timeout=core.timeout(core.STREAM_READ_TIMEOUT_S)) as resp:
                yield resp
        except httpx.HTTPError as exc:
            raise Exit(2, f"cannot reach the API at {self.base}: {exc}") from None


def _ok(status: int, body: Any) -> Any:
    if status >= 400:
        raise Exit(1, render.error_line(status, body),
                   ApiError.from_body(status, body).as_json())
    return body


def _print_json(data: Any) -> None:
    print(json.dumps(data, ensure_ascii=False, indent=2))


def _print_items(items: Sequence[Json]) -> None:
    for it in items:
        print(render.item_line(it), flush=True)


@contextlib.contextmanager
def progress(label: str, budget_s: float | None = None) -> Iterator[None]:
    """A progress line on stderr while a long call runs (a ticking counter on a terminal)."""
    started = time.monotonic()
    stop = threading.Event()
    tty = sys.stderr.isatty()
    suffix = f" (up to {budget_s:g} s)" if budget_s else ""
    if not tty:
        print(f"{label}{suffix}…", file=sys.stderr, flush=True)

    def tick() -> None:
        while not stop.wait(0.5):
            print(f"\r{label}{suffix}… {time.monotonic() - started:.0f} s", end="",
                  file=sys.stderr, flush=True)

    t = threading.Thread(target=tick, daemon=True) if tty else None
    if t:
        t.start()
    try:
        yield
    finally:
        stop.set()
        if t:
            t.join()
            print("\r\033[K", end="", file=sys.stderr)
        print(f"{label}: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- commands


def cmd_create(api: Api, args: argparse.Namespace) -> int:
    body = create_body(
        harness=args.harness, placement=args.placement, parts=args.parts or [],
        string_input=args.string_input, stream=args.stream,
        client_request_id=args.client_request_id or str(uuid.uuid4()), metadata=args.metadata,
        tags=args.tags, actor=args.actor,
    )
    if args.stream and args.wait:
        raise UsageError("--stream and --wait cannot be combined")
    if not args.stream:
        return _post(api, args, "/v1/sessions", body, lambda d: (
            f"session {d.get('id')} ({d.get('harness')}, {d.get('placement')}) "
            f"status={d.get('status')}"))
    with api.stream("/v1/sessions", body) as resp:
        if resp.status_code >= 400 or not resp.headers.get("content-type", "").startswith(
                "text/event-stream"):
            resp.read()
            try:
                data = resp.json()
            except ValueError:
                data = resp.text
            _ok(resp.status_code, data)
            if args.json:
                _print_json(data)
            else:
                _print_items(data.get("items", []) if isinstance(data, dict) else [])
            return 0
        for event, data in sse_events(resp.iter_lines()):
            if args.json:
                print(json.dumps({"event": event, "data": data}, ensure_ascii=False),
                      flush=True)
            elif event == "session":
                print(f"session {data.get('id')} ({data.get('harness')}, "
                      f"{data.get('placement')}) — streaming Items", flush=True)
            elif event == "item":
                print(render.item_line(data), flush=True)
            if (event == "item" and not args.follow and data.get("type") == "turn"
                    and data.get("state") in TERMINAL_TURN_STATES):
                return 0
    return 0


def sse_events(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    """``text/event-stream`` lines as ``(event, data)``, the data decoded when it is JSON."""
    for ev in SseParser().feed(lines):
        try:
            yield ev.event, json.loads(ev.data)
        except ValueError:
            yield ev.event, ev.data


def _post(api: Api, args: argparse.Namespace, path: str, body: Json,
          headline: Callable[[Json], str]) -> int:
    """POST a create or event body; with ``--wait`` the answer is the Turn's Items (200), or
    the Items so far when the budget ran out (202: exit code 1)."""
    if not args.wait:
        status, data = api.call("POST", path, body)
    else:
        params = {"wait": "true", "timeout_ms": str(args.timeout_ms)}
        with progress("waiting for the Turn to end", args.timeout_ms / 1000):
            status, data = api.call("POST", path, body, params=params)
    data = _ok(status, data)
    expired = args.wait and status == 202
    if args.json:
        _print_json(data)
        return 1 if expired else 0
    print(headline(data))
    _print_items(data.get("items", []))
    if expired:
        print(f"the Turn did not end within {args.timeout_ms} ms (Items so far above)",
              file=sys.stderr)
        return 1
    return 0


def _post_event(api: Api, args: argparse.Namespace, body: Json) -> int:
    return _post(api, args, f"/v1/sessions/{args.session}/events", body,
                 lambda d: f"event {d.get('event_id')} delivery={d.get('delivery')}")


def cmd_send(api: Api, args: argparse.Namespace) -> int:
    return _post_event(api, args, message_event_body(
        args.parts or [], args.client_event_id or str(uuid.uuid4()), args.metadata, args.tags,
        args.actor))


def cmd_result(api: Api, args: argparse.Namespace) -> int:
    body = tool_result_body(
        call_id=args.call_id, success=args.success, output_parts=args.output or [],
        error=args.error, output_as_parts=args.output_parts,
        client_event_id=args.client_event_id or str(uuid.uuid4()),
        metadata=args.metadata, tags=args.tags, actor=args.actor,
    )
    return _post_event(api, args, body)


def cmd_items(api: Api, args: argparse.Namespace) -> int:
    after = args.after
    every: list[Json] = []
    while True:
        status, data = api.call("GET", f"/v1/sessions/{args.session}/items",
                                params={"after": str(after), "limit": str(args.limit)})
        data = _ok(status, data)
        page = data.get("items", [])
        every += page
        if args.json and not args.all:
            _print_json(data)
            return 0
        if not args.json:
            _print_items(page)
        if not (args.all and data.get("has_more")):
            break
        after = data.get("next_after", after)
    if args.json:
        _print_json({"items": every, "has_more": False})
    elif not every:
        print(f"no Items after {args.after}")
    return 0


def _show(api: Api, args: argparse.Namespace, path: str,
          lines: Callable[[Json], list[str]]) -> int:
    data = _ok(*api.call("GET", path))
    if args.json:
        _print_json(data)
    else:
        print("\n".join(lines(data)))
    return 0


def cmd_call(api: Api, args: argparse.Namespace) -> int:
    return _show(api, args, f"/v1/sessions/{args.session}/tool_results/{args.call_id}",
                 render.call_lines)


def cmd_session(api: Api, args: argparse.Namespace) -> int:
    return _show(api, args, f"/v1/sessions/{args.session}", render.session_lines)


def cmd_tail(api: Api, args: argparse.Namespace) -> int:
    """The stored Items after ``--after``; with ``--follow``, then each Item as it is published
    (the library resumes a dropped stream from the last sequence seen)."""

    def show(item: Json) -> None:
        if args.json:
            print(json.dumps(item, ensure_ascii=False), flush=True)
        else:
            print(render.item_line(item), flush=True)

    def turn_ended(item: Json) -> bool:
        return item.get("type") == "turn" and item.get("state") in TERMINAL_TURN_STATES

    found = 0
    ended = False
    try:
        if not args.follow:
            for item in api.client.items(args.session, after=args.after):
                show(item)
                found += 1
        else:
            stream = api.client.stream_items(args.session, after=args.after,
                                             idle_timeout_s=args.idle_timeout,
                                             timeout_s=args.timeout)
            for item in stream:
                show(item)
                found += 1
                if args.until_turn_end and turn_ended(item):
                    ended = True
                    break
    except ApiError as exc:
        raise Exit(1, render.error_line(exc.status, {"error": exc.as_json()["error"]}),
                   exc.as_json()) from None
    except TransportError as exc:
        raise Exit(2, str(exc)) from None
    if not found and not args.follow and not args.json:
        print(f"no Items of {args.session} after {args.after}", file=sys.stderr)
    if args.follow and args.until_turn_end and not ended:
        print("the tail ended before a Turn did (--timeout / --idle-timeout)", file=sys.stderr)
        return 1
    return 0


COMMANDS = {
    "create": cmd_create,
    "send": cmd_send,
    "result": cmd_result,
    "items": cmd_items,
    "call": cmd_call,
    "session": cmd_session,
    "tail": cmd_tail,
}


def run(argv: Sequence[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv))
    try:
        api = Api(args.api, args.api_key, args.http_timeout)
        return COMMANDS[args.command](api, args)
    except UsageError as exc:
        if args.json:
            _print_json({"error": {"type": "usage", "message": str(exc), "param": None}})
        else:
            print(f"session-core-cli {args.command}: {exc}", file=sys.stderr)
        return 2
    except Exit as exc:
        if args.json:
            body = exc.body if exc.body is not None else {
                "error": {"type": "unreachable" if exc.code == 2 else "failed",
                          "message": exc.message, "param": None}}
            _print_json(body)
        elif exc.message:
            print(exc.message, file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> None:
    raise SystemExit(run(sys.argv[1:] if argv is None else argv))

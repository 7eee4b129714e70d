"""``session-core runtime``: run one Runtime — the reference Runtime (docs/reference-runtime.md)
with a simulated harness, or ``--engine real`` driving a real harness binary (docs/harnesses.md).

Once registered it prints one JSON line on stdout — its registration record — so a script can
read the runtime id; logs go to stderr. SIGINT / SIGTERM stop it cleanly (``status: "gone"``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from runtimes.app import RuntimeConfig, RuntimeService, registration
from runtimes.harness import HARNESSES
from runtimes.live import DEFAULT_FUNCTIONS, LiveHarness, LiveOptions
from runtimes.live import build as build_live
from runtimes.switches import DESCRIPTIONS, NAMES, Switches, from_env, parse_assignments
from shared import eventloop
from shared.domain.harnesses.claude_code import BRIDGE_PROTOCOL
from shared.ids import new_id
from shared.messages.schemas import PLACEMENTS
from shared.process import begin, serve
from shared.settings import Settings, get_settings


def add_switch_flags(parser: argparse.ArgumentParser) -> None:
    """``--set NAME=VALUE`` plus one flag per switch (``--alter-text``, ``--receipt-delay-s``)."""
    group = parser.add_argument_group(
        "misbehaviour switches (also SESSION_CORE_RUNTIME_<NAME> and runtime.control records)"
    )
    group.add_argument("--set", dest="switch_set", action="append", default=[],
                       metavar="NAME=VALUE", help=f"set a switch; names: {', '.join(NAMES)}")
    for name in NAMES:
        flag = "--" + name.replace("_", "-")
        if name == "receipt_delay_s":
            group.add_argument(flag, dest=f"sw_{name}", type=float, default=None,
                               metavar="SECONDS", help=DESCRIPTIONS[name])
        else:
            group.add_argument(flag, dest=f"sw_{name}", action="store_const", const=True,
                               default=None, help=DESCRIPTIONS[name])


def switches_from_args(args: argparse.Namespace, environ: dict[str, str] | None = None
                       ) -> Switches:
    """Environment first, then ``--set``, then the per-switch flags."""
    changes: dict[str, Any] = from_env(environ)
    changes.update(parse_assignments(args.switch_set))
    for name in NAMES:
        value = getattr(args, f"sw_{name}")
        if value is not None:
            changes[name] = value
    return Switches().updated(changes)


def build_parser() -> argparse.ArgumentParser:
    env = os.environ
    p = argparse.ArgumentParser(
        prog="session-core runtime",
        description="Run a reference Runtime: a simulated harness with a deterministic echo model.",
    )
    p.add_argument("--runtime-id", default=env.get("SESSION_CORE_RUNTIME_ID"),
                   help="rt_<32 hex> (default: a new id)")
    p.add_argument("--harness", choices=HARNESSES,
                   default=env.get("SESSION_CORE_RUNTIME_HARNESS", "claude_code"))
    p.add_argument("--placements", default=env.get("SESSION_CORE_RUNTIME_PLACEMENTS",
                                                   "none,self_hosted"),
                   help="comma-separated: none, openai_hosted, self_hosted")
    p.add_argument("--bridge-protocol", type=int, default=BRIDGE_PROTOCOL)
    p.add_argument("--message-images", action=argparse.BooleanOptionalAction, default=None,
                   help="report message image support (default: yes, except minimax_code)")
    p.add_argument("--function-result-images", action=argparse.BooleanOptionalAction,
                   default=None,
                   help="report function-result image support (default: yes, except "
                   "minimax_code)")
    p.add_argument("--status", choices=("ready", "draining"), default="ready")
    p.add_argument("--heartbeat-s", type=float, default=3.0)
    p.add_argument("--turn-idle-ms", type=int, default=1500,
                   help="a Turn with no pending call ends this long after its last input")
    p.add_argument("--sealed-deliveries", action=argparse.BooleanOptionalAction,
                   default=env.get("SESSION_CORE_RUNTIME_SEALED_DELIVERIES", "").lower()
                   in ("1", "true", "yes"),
                   help="ask Core to seal this Runtime's deliveries to a key made at start, so "
                   "no other reader of runtime.deliveries sees their content (docs/security.md)")
    real = p.add_argument_group(
        "real engine (--engine real): drive the real harness binary (docs/harnesses.md)")
    real.add_argument("--engine", choices=("simulated", "real"),
                      default=env.get("SESSION_CORE_RUNTIME_ENGINE", "simulated"),
                      help="simulated (the reference Runtime, with fault switches) or real")
    real.add_argument("--model-base-url", default=env.get("SESSION_CORE_MODEL_BASE_URL"),
                      help="the model provider's base URL the harness talks to (Codex: "
                      "…/v1, Responses API; Claude Code: the Messages API root)")
    real.add_argument("--model", default=env.get("SESSION_CORE_MODEL", "scripted"),
                      help="the model name the harness asks for")
    real.add_argument("--api-key-env", default=env.get("SESSION_CORE_MODEL_API_KEY_ENV",
                                                       "SESSION_CORE_MODEL_API_KEY"),
                      help="the environment variable holding the provider API key (a Secret)")
    real.add_argument("--images", action=argparse.BooleanOptionalAction, default=True,
                      help="the model accepts images (--no-images: a text-only model; the "
                      "Runtime then reports no image capability)")
    real.add_argument("--functions", default=env.get("SESSION_CORE_RUNTIME_FUNCTIONS"),
                      metavar="FILE", help="JSON list of public functions {name, description, "
                      "parameters} exposed to the harness (default: get_weather)")
    real.add_argument("--harness-bin", default=None,
                      help="the harness executable (default: the cached install)")
    real.add_argument("--work-dir", default=env.get("SESSION_CORE_RUNTIME_WORK_DIR"),
                      help="where per-Session harness homes live (default: a temp dir)")
    real.add_argument("--corrupt", choices=("drop_image", "alter_text"), default=None,
                      help="conformance only: a broken adapter that corrupts what it sends")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: settings)")
    p.add_argument("--topic-prefix", help="topic prefix (default: settings)")
    add_switch_flags(p)
    return p


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> RuntimeConfig:
    placements = [p.strip() for p in args.placements.split(",") if p.strip()]
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad or not placements:
        parser.error(f"--placements: unknown {bad or 'empty list'}; use {', '.join(PLACEMENTS)}")
    runtime_id = args.runtime_id or new_id("rt")
    text_only = args.harness == "minimax_code"
    try:
        switches = switches_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    return RuntimeConfig(
        runtime_id=runtime_id,
        harness=args.harness,
        placements=placements,
        bridge_protocol=args.bridge_protocol,
        message_images=(not text_only) if args.message_images is None else args.message_images,
        function_result_images=(
            (not text_only) if args.function_result_images is None
            else args.function_result_images
        ),
        status=args.status,
        heartbeat_s=args.heartbeat_s,
        turn_idle_s=args.turn_idle_ms / 1000,
        switches=switches,
        sealed_deliveries=args.sealed_deliveries,
    )


def settings_from_args(args: argparse.Namespace, base: Settings | None = None) -> Settings:
    settings = base or get_settings()
    update: dict[str, Any] = {}
    if getattr(args, "bootstrap", None):
        update["kafka_bootstrap_servers"] = args.bootstrap
    if getattr(args, "topic_prefix", None) is not None:
        update["topic_prefix"] = args.topic_prefix
    return settings.model_copy(update=update) if update else settings


def live_from_args(args: argparse.Namespace, config: RuntimeConfig,
                   parser: argparse.ArgumentParser) -> LiveHarness | None:
    """The real engine's live harness, or ``None`` for ``--engine simulated``."""
    if getattr(args, "engine", "simulated") != "real":
        return None
    if args.harness == "minimax_code":
        parser.error("--engine real: no real MiniMax Code harness is installable here "
                     "(docs/harnesses.md); use the simulated text-only Runtime")
    if not args.model_base_url:
        parser.error("--engine real needs --model-base-url (or SESSION_CORE_MODEL_BASE_URL)")
    functions = list(DEFAULT_FUNCTIONS)
    if args.functions:
        with open(args.functions, encoding="utf-8") as f:
            functions = json.load(f)
        if not isinstance(functions, list) or not all(
            isinstance(x, dict) and isinstance(x.get("name"), str) for x in functions
        ):
            parser.error("--functions: a JSON list of {name, description, parameters}")
    options = LiveOptions(
        runtime_id=config.runtime_id, harness=args.harness,
        model_base_url=args.model_base_url, model=args.model, api_key_env=args.api_key_env,
        images=args.images, functions=functions, binary=args.harness_bin,
        work_dir=Path(args.work_dir) if args.work_dir else None, corrupt=args.corrupt,
    )
    return build_live(options)


async def run(settings: Settings, config: RuntimeConfig,
              live: LiveHarness | None = None) -> None:
    svc = RuntimeService(settings, config, live=live)

    async def ready() -> bool:
        return svc.ready.is_set()

    def started() -> None:
        # /healthz, /readyz and /metrics (its DLQ count) when SESSION_CORE_HEALTH_PORT is set
        print(json.dumps(registration(config, svc.harness, svc.status, live, svc.incarnation)),
              flush=True)

    await serve(settings, svc, ready, started)


def main(argv: list[str] | None = None) -> None:
    """``python -m runtimes`` (``session-core runtime``): one Runtime, until SIGTERM/SIGINT."""
    begin("runtime")
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    config = config_from_args(args, parser)
    live = live_from_args(args, config, parser)
    settings = settings_from_args(args)
    eventloop.run(run(settings, config, live), settings.event_loop)

"""The conformance kit's runner: start (or find) the Runtime under test, run the cases, render
the table; ``session-core conformance`` is ``main``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from runtimes.app import RuntimeConfig, RuntimeService
from runtimes.conformance.cases import run_case
from runtimes.conformance.probe import (
    CASES,
    KIT_FUNCTIONS,
    REAL_WAIT_S,
    CaseResult,
    Json,
    RuntimeUnderTest,
    Wire,
)
from runtimes.harness import HARNESSES
from runtimes.main import add_switch_flags, settings_from_args, switches_from_args
from shared.ids import new_id
from shared.logging import get_logger
from shared.settings import Settings, get_settings

log = get_logger(__name__)

# --------------------------------------------------------------------------- the kit


@dataclass
class KitOptions:
    runtime_id: str | None = None  # qualify a running Runtime; None: start one in-process
    harness: str = "claude_code"
    message_images: bool | None = None
    function_result_images: bool | None = None
    switches: Json = field(default_factory=dict)  # applied (control record / in-process config)
    cases: tuple[str, ...] = CASES
    registration_timeout_s: float = 15.0
    engine: str = "simulated"  # "real": an in-process Runtime driving the real harness binary
    model_base_url: str | None = None  # real engine: None starts a scripted model server
    corrupt: str | None = None  # real engine: a broken adapter (drop_image | alter_text)


async def run_kit(
    settings: Settings, opts: KitOptions
) -> tuple[RuntimeUnderTest, list[CaseResult]]:
    """Run the qualification cases; returns the Runtime under test and one result per case."""
    wire = Wire(settings)
    await wire.start()
    svc: RuntimeService | None = None
    restore: Json = {}
    model: Any = None
    try:
        if opts.runtime_id is None and opts.engine == "real":
            from runtimes.live import LiveOptions
            from runtimes.live import build as build_live
            from scripted_model.server import ModelServer

            model = ModelServer().start()
            images = opts.message_images if opts.message_images is not None else True
            config = RuntimeConfig(runtime_id=new_id("rt"), harness=opts.harness)
            live = build_live(LiveOptions(
                runtime_id=config.runtime_id, harness=opts.harness,
                model_base_url=opts.model_base_url or model.url + (
                    "/v1" if opts.harness == "codex" else ""),
                images=images, functions=KIT_FUNCTIONS, corrupt=opts.corrupt))
            svc = RuntimeService(settings, config, live=live)
            await svc.start()
            caps = live.capabilities()
            rt = RuntimeUnderTest(config.runtime_id, config.harness, caps["message_images"],
                                  caps["function_result_images"],
                                  {"corrupt": opts.corrupt} if opts.corrupt else {},
                                  scripts=model.scripts, engine="real", wait_s=REAL_WAIT_S)
        elif opts.runtime_id is None:
            from runtimes.switches import Switches

            text_only = opts.harness == "minimax_code"
            config = RuntimeConfig(
                runtime_id=new_id("rt"),
                harness=opts.harness,
                message_images=(not text_only if opts.message_images is None
                                else opts.message_images),
                function_result_images=(not text_only if opts.function_result_images is None
                                        else opts.function_result_images),
                switches=Switches().updated(opts.switches),
            )
            svc = RuntimeService(settings, config)
            await svc.start()
            rt = RuntimeUnderTest(config.runtime_id, config.harness, svc.harness.message_images,
                                  svc.harness.function_result_images, svc.harness.switches.active())
        else:
            rt = await _external(wire, opts, restore)
        results = await asyncio.gather(*(run_case(n, wire, rt) for n in opts.cases))
        return rt, list(results)
    finally:
        if restore and opts.runtime_id is not None:
            await wire.control(opts.runtime_id, restore)
        if svc is not None:
            await svc.stop()
        if model is not None:
            model.stop()
        await wire.stop()


async def _external(wire: Wire, opts: KitOptions, restore: Json) -> RuntimeUnderTest:
    assert opts.runtime_id is not None
    reg = await wire.registration(opts.runtime_id, opts.registration_timeout_s,
                                  lambda r: r.get("status") != "gone")
    if reg is None:
        raise SystemExit(f"conformance: no live registration of {opts.runtime_id} on "
                         f"{wire.topics.runtime_registrations}")
    if opts.harness and reg.get("harness") != opts.harness:
        raise SystemExit(f"conformance: {opts.runtime_id} runs {reg.get('harness')}, "
                         f"not {opts.harness}")
    if opts.switches:
        from runtimes.switches import Switches

        before = reg.get("switches") or {}
        default = Switches().as_dict()
        restore.update({k: before.get(k, default[k]) for k in opts.switches})
        await wire.control(opts.runtime_id, opts.switches)
        want = Switches().updated({**before, **opts.switches}).active()
        reg = await wire.registration(
            opts.runtime_id, opts.registration_timeout_s,
            lambda r: (r.get("switches") or {}) == want)
        if reg is None:
            raise SystemExit("conformance: the runtime did not confirm the switches "
                             "(does it read runtime.control?)")
    caps = reg.get("capabilities") or {}
    return RuntimeUnderTest(
        str(reg["runtime_id"]), str(reg["harness"]), bool(caps.get("message_images")),
        bool(caps.get("function_result_images")), dict(reg.get("switches") or {}),
    )


def render(rt: RuntimeUnderTest, results: list[CaseResult]) -> str:
    sw = ", ".join(f"{k}={v}" for k, v in rt.switches.items()) or "none"
    lines = [
        f"Conformance of runtime {rt.runtime_id} ({rt.harness}, {rt.engine} engine; "
        "message_images="
        f"{'yes' if rt.message_images else 'no'}, function_result_images="
        f"{'yes' if rt.function_result_images else 'no'}; switches: {sw})",
        "",
        f"{'CASE':<30} {'RESULT':<6} {'TIME':>7}  DETAIL",
    ]
    for r in results:
        lines.append(f"{r.name:<30} {r.status:<6} {r.seconds:>6.2f}s  {r.detail}")
    n = {s: sum(1 for r in results if r.status == s) for s in ("PASS", "FAIL", "SKIP")}
    lines += ["", f"{len(results)} cases: {n['PASS']} passed, {n['FAIL']} failed, "
              f"{n['SKIP']} skipped"]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="session-core conformance",
        description="Qualify a Runtime over the wire: publish deliveries to it, check its "
        "native observations with the receipt rules, print PASS/FAIL per case.",
    )
    p.add_argument("--runtime-id", help="qualify this running Runtime (default: start a "
                   "reference Runtime in-process)")
    p.add_argument("--harness", choices=HARNESSES, default=None,
                   help="harness of the in-process Runtime (default claude_code); with "
                   "--runtime-id, the harness it must run")
    p.add_argument("--message-images", action=argparse.BooleanOptionalAction, default=None)
    p.add_argument("--function-result-images", action=argparse.BooleanOptionalAction,
                   default=None)
    p.add_argument("--cases", help=f"comma-separated subset of: {', '.join(CASES)}")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.add_argument("--engine", choices=("simulated", "real"), default="simulated",
                   help="real: start an in-process Runtime driving the real harness binary "
                   "against a scripted model server (docs/harnesses.md)")
    p.add_argument("--model-base-url", default=None,
                   help="real engine: the model endpoint (default: an in-process scripted one)")
    p.add_argument("--corrupt", choices=("drop_image", "alter_text"), default=None,
                   help="real engine: a broken adapter that corrupts what it sends (the kit "
                   "must then fail)")
    p.add_argument("--bootstrap", help="Kafka bootstrap servers (default: settings)")
    p.add_argument("--topic-prefix", help="topic prefix (default: settings)")
    add_switch_flags(p)
    return p


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    cases = CASES
    if args.cases:
        cases = tuple(c.strip() for c in args.cases.split(",") if c.strip())
        unknown = [c for c in cases if c not in CASES]
        if unknown:
            parser.error(f"--cases: unknown {unknown}; known: {', '.join(CASES)}")
    try:
        switches = switches_from_args(args, environ={})
    except ValueError as exc:
        parser.error(str(exc))
    changed = {k: v for k, v in switches.as_dict().items() if k in switches.active()}
    opts = KitOptions(
        runtime_id=args.runtime_id,
        harness=args.harness or ("" if args.runtime_id else "claude_code"),
        message_images=args.message_images,
        function_result_images=args.function_result_images,
        switches=changed,
        cases=cases,
        engine=args.engine,
        model_base_url=args.model_base_url,
        corrupt=args.corrupt,
    )
    settings = settings_from_args(args, get_settings())
    rt, results = asyncio.run(run_kit(settings, opts))
    if args.json:
        print(json.dumps({
            "runtime_id": rt.runtime_id, "harness": rt.harness, "switches": rt.switches,
            "results": [r.as_dict() for r in results],
            "passed": all(r.status != "FAIL" for r in results),
        }))
    else:
        print(render(rt, results))
    raise SystemExit(1 if any(r.status == "FAIL" for r in results) else 0)


__all__ = ["CASES", "CaseResult", "KitOptions", "main", "render", "run_kit"]

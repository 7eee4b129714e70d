"""``session-core demo``: the short scripted tour ``make run`` plays once everything is ready.

It drives the running system with the user CLI ``session-core-cli`` only (each command is
printed before it runs, so the tour doubles as a CLI tutorial): an image message to Claude
Code, a function call answered and confirmed on Codex (on ``make run``: the real ``codex
app-server`` against the scripted model server, confirmed by the real receipt), and a
whitespace-only message rejected for Claude Code but admitted for Codex. Items are printed as
they arrive, and each step's answer — the Turn's final agent message — is printed on its own;
on the scripted model (``make run``, ``make demo-check``) the demo fails unless each answer is
exactly the scripted text."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

WHITESPACE = " \n\t"
# what the CLI prints for Claude Code's refusal of it (CONTRACT: 400, this type)
REFUSAL = "error 400 unsupported_or_invalid_configuration"
BOLD, DIM, RESET = ("\033[1m", "\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "", "")


def _cli(*args: str, check: bool = True, show: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "session_core_client.cli", *args]
    if show:
        print(f"{DIM}$ session-core-cli {' '.join(_quote(a) for a in args)}{RESET}", flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                       env=os.environ.copy(), check=False)
    if show and p.stdout and "--json" not in args:
        print(p.stdout.rstrip(), flush=True)
    if show and p.stderr.strip() and p.returncode != 0:
        print(p.stderr.rstrip(), file=sys.stderr, flush=True)
    if check and p.returncode != 0:
        raise SystemExit(f"demo: command failed ({p.returncode}): {' '.join(args)}")
    return p


def _quote(a: str) -> str:
    return json.dumps(a) if (" " in a or not a or "{" in a) else a


def _json(*args: str) -> Any:
    return json.loads(_cli(*args, "--json", show=True).stdout)


def _sample_png(path: Path) -> None:
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (96, 64), (250, 250, 245))
    d = ImageDraw.Draw(img)
    d.ellipse((20, 12, 60, 52), fill=(230, 120, 30))
    d.rectangle((62, 30, 90, 58), fill=(40, 90, 200))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    path.write_bytes(buf.getvalue())


def _step(title: str) -> None:
    print(f"\n{BOLD}== {title}{RESET}", flush=True)


def _script(key: str, replies: list[list[dict[str, Any]]]) -> bool:
    """Script the local model (``make run``'s scripted model server, SESSION_CORE_MODEL_SERVER)
    for the conversation whose text holds ``key``; False when there is none (simulated
    Runtimes only)."""
    import urllib.request

    base = os.environ.get("SESSION_CORE_MODEL_SERVER")
    if not base:
        return False
    req = urllib.request.Request(base + "/_scripts", method="POST",
                                 data=json.dumps({"key": key, "replies": replies}).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return bool(r.status == 200)


def _show_model_saw_image(key: str, png: bytes) -> bool:
    """Print what the scripted model received for ``key``: the image block's bytes compared
    with the file's; True when they are the same."""
    import base64
    import urllib.request

    base = os.environ["SESSION_CORE_MODEL_SERVER"]
    with urllib.request.urlopen(f"{base}/_requests?key={key}", timeout=10) as r:
        recorded = json.loads(r.read())
    sent = base64.b64encode(png).decode()
    for req in recorded:
        for msg in req["body"].get("messages", []):
            content = msg.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "image":
                    same = block.get("source", {}).get("data") == sent
                    print(f"the model received a {block['source'].get('media_type')} image "
                          f"block of {len(png)} bytes: "
                          f"{'byte for byte as sent' if same else 'CHANGED by the harness'}",
                          flush=True)
                    return bool(same)
    print("the model request carried no image block", flush=True)
    return False


def _answer(session: str, expect: str | None, step: str, failed: list[str],
            timeout: float = 30) -> None:
    """Print the Turn's answer — its final agent message, as the model wrote it — and, on the
    scripted model (``expect``), note a failure when it is not exactly the scripted text. (A
    simulated Runtime's Turn may end without one: it only echoes before a call.)"""
    from session_core_client.answers import final_answer

    deadline = time.monotonic() + timeout
    while True:
        page = json.loads(_cli("items", session, "--all", "--json", show=False).stdout)
        answer = final_answer(page.get("items", page if isinstance(page, list) else []))
        if answer is not None or expect is None or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    print(f"{BOLD}the model answered:{RESET} {answer!r}", flush=True)
    if expect is not None and answer != expect:
        failed.append(f"{step}: the model's answer is {answer!r}, not {expect!r}")


def _wait_call(session: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page = json.loads(_cli("items", session, "--all", "--json", show=False).stdout)
        for it in page.get("items", page if isinstance(page, list) else []):
            if it.get("type") == "function_call":
                return str(it["call_id"])
        time.sleep(0.3)
    raise SystemExit("demo: the Runtime did not call the function in time")


def main(argv: list[str] | None = None) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="session-core-demo-"))
    picture = tmp / "shapes.png"
    _sample_png(picture)

    _step("1. An image message to Claude Code (text + inline PNG), Items as they arrive")
    # On make run the real claude binary sends the image, as a native image block, to the
    # scripted model server; the model's request log shows the bytes arrived unchanged.
    key = f"demo-shapes-{os.getpid()}-{int(time.time())}"
    shapes = "An orange circle and a blue square."
    scripted = _script(key, [[{"text": shapes}]])
    question = (f"[{key}] What shapes are in this picture?" if scripted
                else "What shapes are in this picture?")
    s = _json("create", "--harness", "claude_code", "--placement", "none",
              "--text", question, "--image", str(picture))
    sid = s["id"]
    _cli("tail", sid, "--follow", "--until-turn-end", "--timeout", "60")
    failed: list[str] = []  # what the demo claims and did not see: exit code 1 at the end
    if scripted and not _show_model_saw_image(key, picture.read_bytes()):
        failed.append("1: the model did not receive the image byte for byte")
    _answer(sid, shapes if scripted else None, "1", failed)

    _step("2. A function call on Codex, answered and confirmed by the native receipt")
    # On the real Codex (make run) the scripted model calls get_weather; the item/completed the
    # real codex app-server prints for the answer is the receipt. On a simulated Runtime the
    # text's "call …" makes the call.
    key = f"demo-weather-{os.getpid()}-{int(time.time())}"
    weather = "It is sunny in Paris, 21°C."
    scripted = _script(key, [[{"tool_call": {"name": "get_weather",
                                             "arguments": {"city": "Paris"}}}],
                             [{"text": weather}]])
    text = (f"[{key}] What is the weather in Paris?" if scripted
            else 'Weather please: call get_weather {"city": "Paris"}')
    s = _json("create", "--harness", "codex", "--placement", "none", "--text", text)
    sid2 = s["id"]
    call_id = _wait_call(sid2)
    _cli("items", sid2)
    answered = _cli("result", sid2, call_id, "--success", "--output", "sunny, 21°C", "--wait",
                    "--timeout-ms", "30000", check=False)
    if answered.returncode != 0:  # 1: the Turn did not end within the wait (202)
        failed.append(f"2: the result's Turn did not end within 30 s (exit {answered.returncode})")
    _cli("call", sid2, call_id)
    state = _json("call", sid2, call_id).get("state")
    if state != "applied":
        failed.append(f"2: the function result's application is {state!r}, not 'applied'")
    _answer(sid2, weather if scripted else None, "2", failed)

    _step("3. A whitespace-only message: rejected for Claude Code, admitted for Codex")
    refused = _cli("create", "--harness", "claude_code", "--text", WHITESPACE, check=False)
    if refused.returncode != 1 or REFUSAL not in refused.stderr:
        failed.append(f"3: Claude Code's whitespace-only message was not refused with {REFUSAL}"
                      f" (exit {refused.returncode}: {refused.stderr.strip()[:200]!r})")
    s = _json("create", "--harness", "codex", "--text", WHITESPACE)  # admitted, or the demo stops
    _cli("tail", s["id"], "--follow", "--until-turn-end", "--timeout", "30")
    page = json.loads(_cli("items", s["id"], "--all", "--json", show=False).stdout)
    texts = [part.get("text") for it in page.get("items", []) if it.get("type") == "message"
             for part in it.get("content", [])]
    if WHITESPACE not in texts:
        failed.append(f"3: Codex's message is not stored as sent ({texts!r})")

    if failed:
        raise SystemExit("demo: FAILED — " + "; ".join(failed))
    print(f"\n{BOLD}Demo done. The system keeps running — try the CLI yourself:{RESET}")
    print(f"  .venv/bin/session-core-cli create --harness claude_code --text hi --image {picture}")
    print(f"  .venv/bin/session-core-cli tail {sid} --follow")
    print("  .venv/bin/session-core-cli --help")
    print("Press Ctrl-C to stop everything.", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

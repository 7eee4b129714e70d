#!/usr/bin/env python3
"""A misbehaving stand-in for ``codex app-server`` (stdlib only), for the live driver's fault
tests: ``BROKEN_CODEX_MODE`` = crash (exit after turn/start), garbage (non-JSON lines after
turn/start), hang (silence after turn/start), dead (exit at once), ok (a Turn that completes)."""

import json
import os
import sys

MODE = os.environ.get("BROKEN_CODEX_MODE", "ok")


def out(msg: dict) -> None:
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


if MODE == "dead":
    sys.exit(3)
turns = 0
for line in sys.stdin:
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if method == "initialize":
        out({"id": rid, "result": {"userAgent": "broken/0"}})
    elif method == "thread/start":
        out({"id": rid, "result": {"thread": {"id": "thr-broken"}}})
    elif method == "turn/start":
        turns += 1
        tid = f"turn-{turns}"
        out({"id": rid, "result": {"turn": {"id": tid, "status": "inProgress"}}})
        out({"method": "turn/started", "params": {"threadId": "thr-broken",
                                                  "turn": {"id": tid}}})
        if MODE == "crash":
            sys.exit(1)
        if MODE == "garbage":
            for i in range(25):
                sys.stdout.write(f"garbage line {i} <<<\n")
            sys.stdout.flush()
        if MODE == "ok":
            out({"method": "turn/completed", "params": {"threadId": "thr-broken", "turn": {
                "id": tid, "status": "completed"}}})
        # hang: print nothing more

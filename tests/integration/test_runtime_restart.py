"""A Runtime process killed (``kill -9``) mid-Session and started again a few seconds later under
the same ``runtime_id`` (issue 58, docs/chaos.md "Real harnesses"): the reference Runtime runs
as its own process (``session-core runtime``, simulated engine) beside the in-process services
on the real stack. After the restart a new Session is bound to it and its function call gets
its ``applied`` verdict, and the Turn the dead process carried ends (``failed``: its harness
is gone with the result it held) instead of waiting for ever; observations only from the bound
Runtime stay enforced throughout (docs/security.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from shared.domain.wire import message_delivery
from shared.kafka import encode
from shared.topics import topics_for
from tests.support.system import System, SystemFactory, create, items

pytestmark = [pytest.mark.integration, pytest.mark.slow]
Json = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]


class RuntimeProcess:
    """``session-core runtime`` (simulated codex) on the test's topics, in a process group of
    its own so that ``kill`` takes it down as ``kill -9`` would."""

    def __init__(self, system: System, runtime_id: str, log: Path) -> None:
        self.system, self.runtime_id, self.log = system, runtime_id, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *args: str) -> None:
        s = self.system.settings
        env = {**os.environ, "PYTHONPATH": str(REPO), "SESSION_CORE_LOG_FORMAT": "json"}
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "runtime", "--runtime-id", self.runtime_id,
             "--harness", "codex", "--placements", "none", "--heartbeat-s", "1",
             "--turn-idle-ms", "120000", "--bootstrap", s.kafka_bootstrap_servers,
             "--topic-prefix", s.topic_prefix, *args],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
        out.close()

    def logged(self, event: str, **fields: Any) -> bool:
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(line)
                if rec.get("event") == event and all(rec.get(k) == v for k, v in fields.items()):
                    return True
        return False

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


async def result(system: System, sid: str, call_id: str) -> None:
    r = await system.event(sid, {"type": "agent.session.input.tool_result", "call_id": call_id,
                                 "success": True, "output": "sunny"})
    assert r.status_code == 202, r.text


def is_call(i: Json) -> bool:
    return bool(i["type"] == "function_call")


async def until(pred: Any, timeout: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not pred():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.1)


async def test_a_runtime_killed_and_restarted_under_its_id_takes_new_sessions(
        make_system: SystemFactory, tmp_path: Path) -> None:
    """Killed holding a function result it has read (and committed: it will not read it
    again), started again 3 s later: the restarted process registers at once, not after its
    deliveries consumer's group has timed the dead member out (10 s, longer than the heartbeat
    timeout) — so it is not taken for gone meanwhile; the Turn the dead process ran fails (no
    later delivery would end it) and the call ends with one verdict; a new Session is bound to
    it and its call is applied. Seen failing without either: the new Session's observations
    refused (bound to none) and no call; the held Turn never ending."""
    system = await make_system(runtime_heartbeat_timeout_s=6.0, binding_wait_timeout_s=60.0)
    rid = f"rt_{uuid.uuid4().hex}"
    rt = RuntimeProcess(system, rid, tmp_path / "runtime.log")
    rt.start("--receipt-delay-s", "120")  # the harness holds each result it gets
    try:
        old = await create(system, "codex", 'before the kill call probe {"n": 1}')
        call = await system.items.wait_for(old, is_call, timeout=60)
        await result(system, old, call["call_id"])
        await until(lambda: rt.logged("delivery.received", kind="function_result"), 30,
                    "the result was not received")
        await asyncio.sleep(1.5)  # read and committed: the restarted process does not get it
        first = system.dispatcher.registry.runtimes[rid].incarnation
        assert first is not None
        rt.kill()
        killed = time.monotonic()
        await asyncio.sleep(3.0)
        rt.start()
        # the restarted process registers well within the heartbeat timeout after the kill
        await until(lambda: system.dispatcher.registry.runtimes[rid].incarnation != first, 30,
                    "the restarted Runtime did not register")
        registered = time.monotonic() - killed
        assert registered < 6.0, f"registered {registered:.1f} s after the kill"

        new = await create(system, "codex", 'after the restart call probe {"n": 2}')
        call2 = await system.items.wait_for(new, is_call, timeout=60)
        await result(system, new, call2["call_id"])
        app = await system.items.wait_for(
            new, lambda i: i["type"] == "function_call_application"
            and i["call_id"] == call2["call_id"], timeout=60)
        assert app["state"] == "applied", app

        # the Turn the dead process ran ended failed, and its call has one verdict
        end = await system.items.wait_for(
            old, lambda i: i["type"] == "turn" and i["state"] in ("completed", "failed")
            and i["turn_id"] == call["turn_id"], timeout=60)
        assert end["state"] == "failed", end
        verdict = await system.items.wait_for(
            old, lambda i: i["type"] == "function_call_application", timeout=90)
        assert verdict["state"] in ("uncertain", "failed"), verdict
        await asyncio.sleep(1.0)
        got = await items(system, old)
        assert len([i for i in got if i["type"] == "function_call_application"]) == 1
        assert len([i for i in got if i["type"] == "turn" and i["state"] != "started"]) == 1
    finally:
        rt.stop()


async def test_a_restarted_runtime_does_not_run_what_its_predecessor_was_sent(
        make_system: SystemFactory, tmp_path: Path) -> None:
    """Deliveries the dead process was sent but had not committed — read or not, the restarted
    process cannot tell — come again to its successor, which must not run them: the predecessor
    may have run them already (a second native Turn for a Turn Core completed: docs/chaos.md).
    Each delivery names the process it was sent to (``incarnation``); the successor skips its
    predecessor's and runs its own. Seen without the rule: both run."""
    system = await make_system(runtime_heartbeat_timeout_s=6.0)
    rid = f"rt_{uuid.uuid4().hex}"
    rt = RuntimeProcess(system, rid, tmp_path / "runtime.log")
    rt.start()
    try:
        await until(lambda: rid in system.dispatcher.registry.runtimes, 30, "no registration")
        first = system.dispatcher.registry.runtimes[rid].incarnation
        assert first is not None
        await until(lambda: rt.logged("runtime.started"), 30, "the Runtime did not start")
        rt.kill()
        # sent to the dead process after its last commit: its successor reads it
        old_id, new_id = f"dlv_old_{uuid.uuid4().hex}", f"dlv_new_{uuid.uuid4().hex}"
        await send_delivery(system, rid, old_id, first)
        rt.start()
        await until(lambda: system.dispatcher.registry.runtimes[rid].incarnation != first, 30,
                    "the restarted Runtime did not register")
        second = system.dispatcher.registry.runtimes[rid].incarnation
        assert second is not None
        await send_delivery(system, rid, new_id, second)
        await until(lambda: rt.logged("delivery.received", delivery_id=new_id), 60,
                    "the delivery sent to the restarted process was not run")
        assert rt.logged("delivery.other_process", delivery_id=old_id, sent_to=first,
                         incarnation=second)
        assert not rt.logged("delivery.received", delivery_id=old_id)
    finally:
        rt.stop()


async def send_delivery(system: System, rid: str, delivery_id: str, incarnation: str) -> None:
    """A ``start`` for a Session of its own, addressed to ``rid``'s process ``incarnation``, on
    the test's ``runtime.deliveries`` as the dispatcher sends it (``Binder.send``)."""
    delivery = {**message_delivery(
        delivery_id=delivery_id, runtime_id=rid, session_id=f"session_{uuid.uuid4().hex}",
        turn_id=f"turn_{uuid.uuid4().hex}", kind="start",
        messages=[{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]),
        "incarnation": incarnation}
    producer = AIOKafkaProducer(bootstrap_servers=system.settings.kafka_bootstrap_servers)
    await producer.start()
    try:
        await producer.send_and_wait(topics_for(system.settings).runtime_deliveries,
                                     encode(delivery), key=rid.encode())
    finally:
        await producer.stop()

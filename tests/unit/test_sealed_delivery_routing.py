"""Sealed deliveries at each end (docs/security.md, "Sealed deliveries"): the dispatcher reads a
Runtime's key from its registration and seals every delivery to it and to Core's key, never
sends a sealing Runtime content in clear, and binds none while it has no seal key; the Runtime
opens what is sealed to it and refuses — never runs — what it cannot open."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest

from runtimes.deliveries import DeliveryLoop
from runtimes.harness import Emit
from services.dispatcher.binder import Binder
from services.dispatcher.domain.binding import from_registration, ineligibility
from shared import records, sealing
from shared.domain import wire
from shared.kafka import encode
from shared.sealing import KeyPair
from tests.unit.test_binder import HEARTBEAT_S, WAIT_S, World, runtime, stored
from tests.unit.test_binding import NOW, TIMEOUT, rt

RUNTIME, CORE = KeyPair.generate(), KeyPair.generate()


def registration(**caps: Any) -> dict[str, Any]:
    rec = records.registration_record(
        runtime_id="rt_" + "a" * 32, harness="codex", bridge_protocol=3, placements=["none"],
        message_images=True, function_result_images=True, status="ready",
        heartbeat_at="2025-01-01T12:00:00Z")
    rec["capabilities"].update(caps)
    return rec


def test_the_key_comes_from_the_registration() -> None:
    rec = records.registration_record(
        runtime_id="rt_" + "a" * 32, harness="codex", bridge_protocol=3, placements=["none"],
        message_images=True, function_result_images=True, status="ready",
        heartbeat_at="2025-01-01T12:00:00Z", sealed_key=RUNTIME.public)
    assert from_registration(rec).sealed_key == RUNTIME.public
    assert from_registration(registration()).sealed_key is None


@pytest.mark.parametrize("sealed", [True, "yes", {"alg": "rsa"}, {"alg": sealing.ALG},
                                    {"alg": sealing.ALG, "key": "short"}])
def test_a_registration_with_a_key_core_cannot_seal_to_is_refused(sealed: Any) -> None:
    with pytest.raises(ValueError):  # the registry's tail dead-letters it
        from_registration(registration(sealed_deliveries=sealed))


def test_without_a_seal_key_a_runtime_that_asks_for_sealing_is_not_eligible() -> None:
    sealing_rt = rt(sealed_key=RUNTIME.public)
    assert ineligibility(sealing_rt, "claude_code", "none", False, NOW, TIMEOUT) is None
    why = ineligibility(sealing_rt, "claude_code", "none", False, NOW, TIMEOUT, can_seal=False)
    assert why is not None and why.startswith("sealed_deliveries")
    assert ineligibility(rt(), "claude_code", "none", False, NOW, TIMEOUT, can_seal=False) is None


def sealing_world(seal_key: str | None, require: bool = False) -> World:
    world = World()
    world.binder = Binder(world.repo, world.registry, world.out, heartbeat_timeout_s=HEARTBEAT_S,
                          binding_wait_timeout_s=WAIT_S, clock=world.clock, seal_key=seal_key,
                          require_sealing=require)
    return world


def register_sealing(world: World, runtime_id: str) -> None:
    world.registry.register(dataclasses.replace(runtime(runtime_id, world.clock.at()),
                                                sealed_key=RUNTIME.public))


async def test_every_delivery_to_a_sealing_runtime_is_sealed_to_it_and_to_core() -> None:
    world = sealing_world(CORE.private_text)
    register_sealing(world, "rt_sealed")
    start = stored("s1", "t1", "start")
    await world.binder.accept(start)
    result = stored("s1", "t1", "function_result")
    await world.binder.accept(result)
    sent = world.delivered("rt_sealed")
    assert [m["kind"] for m in sent] == ["start", "function_result"]
    for m in sent:
        assert "messages" not in m and "content" not in m and sealing.is_sealed(m)
    opened = sealing.unseal(sent[0], RUNTIME)
    assert opened["messages"] == start["messages"]
    for keys in (RUNTIME, CORE):  # the tracker opens a result with Core's key
        assert sealing.unseal(sent[1], keys)["content"] == wire.result_content(
            result["submission"]["output"], None)


async def test_without_a_seal_key_a_sealing_runtime_gets_no_session_and_no_content() -> None:
    world = sealing_world(None)
    register_sealing(world, "rt_sealed")
    await world.binder.accept(stored("s1", "t1", "start"))
    assert world.delivered() == []
    world.register("rt_plain")  # a Runtime that does not ask gets it, in clear
    await world.binder.sweep()
    assert [(rid, "messages" in m) for rid, m in world.out.deliveries] == [("rt_plain", True)]


async def test_where_sealing_is_required_only_a_sealing_runtime_is_bound() -> None:
    world = sealing_world(CORE.private_text, require=True)
    world.register("rt_plain")
    await world.binder.accept(stored("s1", "t1", "start"))
    assert world.delivered() == []  # the Session waits
    register_sealing(world, "rt_sealed")
    await world.binder.sweep()
    assert [(rid, sealing.is_sealed(m)) for rid, m in world.out.deliveries] == [
        ("rt_sealed", True)]
    why = ineligibility(rt(), "claude_code", "none", False, NOW, TIMEOUT, must_seal=True)
    assert why is not None and "required" in why


def test_requiring_sealing_without_a_seal_key_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="SESSION_CORE_SEAL_KEY"):
        sealing_world(None, require=True)


class Outbox:
    def __init__(self) -> None:
        self.emitted: list[Emit] = []

    def enqueue(self, emits: list[Emit]) -> None:
        self.emitted.extend(emits)


def loop_of(keys: KeyPair | None) -> tuple[DeliveryLoop, list[Any], Outbox]:
    handled: list[Any] = []
    outbox = Outbox()

    async def handle(d: Any) -> None:
        handled.append(d)

    async def dead_letter(r: Any, poison: Any) -> None:
        raise AssertionError(f"dead-lettered: {poison}")

    loop = DeliveryLoop(SimpleNamespace(), "rt_a", handle, outbox,  # type: ignore[arg-type]
                        asyncio.Event(), dead_letter, harness="codex", keys=keys)
    return loop, handled, outbox


SID = "session_" + "1" * 32


def delivery() -> dict[str, Any]:
    return wire.message_delivery(
        delivery_id="dlv_1", runtime_id="rt_a", session_id=SID, turn_id="turn_1",
        kind="start", messages=[{"role": "user", "content": [{"type": "input_text",
                                                              "text": "hello"}]}])


def raw(value: dict[str, Any]) -> Any:
    return SimpleNamespace(value=encode(value), key=b"rt_a", headers=[], topic="t",
                           partition=0, offset=0)


async def test_the_runtime_opens_what_is_sealed_to_it_and_runs_it_as_sent() -> None:
    loop, handled, outbox = loop_of(RUNTIME)
    assert await loop.handle_raw(raw(sealing.seal(delivery(), [RUNTIME.public,
                                                               CORE.public]))) == 1
    assert handled == [delivery()] and outbox.emitted == []


@pytest.mark.parametrize("keys", [None, KeyPair.generate()], ids=["no key", "another key"])
async def test_a_delivery_the_runtime_cannot_open_is_refused_never_run(
        keys: KeyPair | None) -> None:
    loop, handled, outbox = loop_of(keys)
    assert await loop.handle_raw(raw(sealing.seal(delivery(), [RUNTIME.public]))) == 1
    assert handled == []
    [emit] = outbox.emitted
    refusal = emit.record["refusal"]
    assert refusal["delivery_id"] == "dlv_1" and refusal["terminal"] is True
    assert refusal["reason"].startswith("unsealable")
    assert emit.record["runtime_id"] == "rt_a" and emit.record["turn_id"] == "turn_1"

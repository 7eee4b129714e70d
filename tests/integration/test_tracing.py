"""One trace from ``POST /v1/sessions`` to the call's ``function_call_application`` Item, on the
real stack: the four services and a reference Runtime (simulated Claude Code) in-process, each
with its own tracer provider (``service.name``), spans to an in-memory exporter. The context
crosses every hop in the records' ``traceparent`` headers (shared/tracing.py); the producer that
answers the function call continues the trace by sending the ``function_call`` Item record's
``traceparent`` with its HTTP result, as docs/operations.md ("Tracing") says a producer may."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from runtimes.app import RuntimeConfig, RuntimeService
from runtimes.switches import Switches
from shared.kafka import assigned_consumer, decode
from shared.settings import Settings
from tests.e2e.test_record_schemas import read_records, wire_errors
from tests.support.system import SystemFactory, until

pytestmark = pytest.mark.integration


async def item_record(settings: Settings, topic: str, pred: Callable[[dict[str, Any]], bool],
                      timeout: float = 20) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The first record of ``topic`` whose value ``pred`` accepts, with its headers."""
    c = await assigned_consumer(settings, topic, at_end=False)
    try:
        async with asyncio.timeout(timeout):
            while True:
                for recs in (await c.getmany(timeout_ms=200)).values():
                    for r in recs:
                        value = decode(r.value)
                        if pred(value):
                            return value, dict(r.headers)
    finally:
        await c.stop()


def service(s: ReadableSpan) -> str:
    return str(s.resource.attributes["service.name"])


def chain(by_id: dict[int, ReadableSpan], leaf: ReadableSpan) -> list[ReadableSpan]:
    """``leaf`` and its ancestors, root first."""
    out = [leaf]
    while out[-1].parent is not None:
        out.append(by_id[out[-1].parent.span_id])
    return out[::-1]


# The path of the call's application, root first, when the receipt decides the call (the applied
# result printed 0.5 s after the delivery: the receipt tracker has read the delivery by then).
EXPECTED = [
    ("POST /v1/sessions", "admission"),
    ("send {admitted}", "admission"),
    ("process {admitted}", "storage"),
    ("send {stored}", "storage"),
    ("process {stored}", "dispatcher"),
    ("dispatcher.deliver", "dispatcher"),
    ("send {deliveries}", "dispatcher"),
    ("process {deliveries}", "runtime"),
    ("runtime.native start", "runtime"),
    ("send {observations}", "runtime"),
    ("process {observations}", "storage"),
    ("send {items}", "storage"),  # the function_call Item, read by the producer
    ("POST /v1/sessions/{{session_id}}/events", "admission"),
    ("send {admitted}", "admission"),
    ("process {admitted}", "storage"),
    ("send {stored}", "storage"),
    ("process {stored}", "dispatcher"),
    ("dispatcher.deliver", "dispatcher"),
    ("send {deliveries}", "dispatcher"),
    ("process {deliveries}", "runtime"),
    ("runtime.native function_result", "runtime"),
    ("send {observations}", "runtime"),
    ("receipts.verdict", "receipts"),
    ("send {facts}", "receipts"),
    ("process {facts}", "storage"),
    ("send {items}", "storage"),  # the function_call_application Item
]


async def test_one_trace_from_post_sessions_to_the_application_item(
        spans: InMemorySpanExporter, make_system: SystemFactory) -> None:
    system = await make_system()
    assert system.http is not None
    t = system.topics
    rt = RuntimeService(system.settings, RuntimeConfig(
        runtime_id=f"rt_{uuid.uuid4().hex}", harness="claude_code", placements=["none"],
        turn_idle_s=5.0, switches=Switches(receipt_delay_s=0.5)))
    await rt.start()
    try:
        r = await system.http.post("/v1/sessions", json={
            "harness": "claude_code", "placement": "none",
            "input": 'please call lookup {"q": 1}'})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        call, headers = await item_record(
            system.settings, t.session_items,
            lambda v: v.get("session_id") == sid and v.get("type") == "function_call")
        assert set(headers) >= {"content-type", "traceparent"}, headers
        # the producer answers the call in the call's trace (W3C traceparent over HTTP)
        r = await system.http.post(
            f"/v1/sessions/{sid}/events",
            headers={"traceparent": headers["traceparent"].decode()},
            json={"type": "agent.session.input.tool_result", "call_id": call["call_id"],
                  "success": True, "output": "42"})
        assert r.status_code == 202, r.text
        app, app_headers = await item_record(
            system.settings, t.session_items,
            lambda v: v.get("session_id") == sid and v.get("type") == "function_call_application")
        assert app["state"] == "applied", app
    finally:
        await rt.stop()
    await asyncio.sleep(0.2)  # the last send spans end at their acks

    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    traceparent = app_headers["traceparent"].decode()
    _, trace_hex, span_hex, _ = traceparent.split("-")
    leaf = by_id[int(span_hex, 16)]
    path = chain(by_id, leaf)
    shown = [(s.name, service(s).removeprefix("session-core-")) for s in path]
    print("\n" + "\n".join(f"{n:<45} {svc}" for n, svc in shown))  # the trace, root first

    # one trace: every span of the path has the Item's trace id, the root is the first request
    assert {s.context.trace_id for s in path} == {int(trace_hex, 16)}
    assert path[0].parent is None and path[0].name == "POST /v1/sessions"
    names = {"admitted": t.session_admitted, "stored": t.session_stored,
             "deliveries": t.runtime_deliveries, "observations": t.runtime_observations,
             "items": t.session_items, "facts": t.core_facts}
    assert shown == [(n.format(**names), svc) for n, svc in EXPECTED], json.dumps(shown)
    # five processes' providers, each its own service.name
    assert {service(s) for s in path} == {f"session-core-{x}" for x in (
        "admission", "storage", "dispatcher", "runtime", "receipts")}
    # each hop between services goes through a record: a CONSUMER span's parent is the
    # PRODUCER span of another service (the context came in the record's headers)
    for parent, child in itertools.pairwise(path):
        if child.name.startswith("process "):
            assert parent.name == child.name.replace("process ", "send "), (parent, child)
            assert child.parent is not None and child.parent.is_remote
    verdict = next(s for s in path if s.name == "receipts.verdict")
    assert verdict.attributes is not None and verdict.attributes["session_core.verdict.state"] \
        == "applied"
    # the whole trace holds more (the other Items, answers, the Turn's end): all one trace id
    in_trace = [s for s in finished if s.context.trace_id == int(trace_hex, 16)]
    assert len(in_trace) > len(path)

    # the records as sent with tracing on match docs/asyncapi.json's headers, and every one of
    # the public topics Core (or the reference Runtime) wrote here carries its traceparent
    bootstrap = system.settings.kafka_bootstrap_servers
    for public, topic in (("session.items", t.session_items),
                          ("runtime.deliveries", t.runtime_deliveries),
                          ("runtime.observations", t.runtime_observations)):
        recs = await read_records(bootstrap, topic)
        assert recs, topic
        assert wire_errors(public, recs) == [], public
        assert all("traceparent" in dict(r.headers) for r in recs), public


async def test_an_input_delivered_after_a_bind_wait_is_in_its_posts_trace(
        spans: InMemorySpanExporter, make_system: SystemFactory) -> None:
    """No Runtime at first: the Session's input waits in the dispatcher's queue (its binding
    ``waiting_for_runtime``). A Runtime starts and the sweeper delivers it: the delivery, the
    Runtime's consume and its native call are in the trace of the ``POST``, not a new one —
    the queued input kept its traceparent (services/dispatcher/binder.py)."""
    system = await make_system()
    assert system.http is not None
    r = await system.http.post("/v1/sessions", json={
        "harness": "claude_code", "placement": "none", "input": "hello"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]

    async def view() -> dict[str, Any]:
        assert system.http is not None
        got: dict[str, Any] = (await system.http.get(f"/v1/sessions/{sid}")).json()
        return got

    await until(view, lambda v: v["status"] == "waiting_for_runtime" and v["binding"])
    assert not [s for s in spans.get_finished_spans() if s.name == "dispatcher.deliver"]
    rt = RuntimeService(system.settings, RuntimeConfig(
        runtime_id=f"rt_{uuid.uuid4().hex}", harness="claude_code", placements=["none"],
        turn_idle_s=5.0))
    await rt.start()
    async def natives() -> list[ReadableSpan]:
        return [s for s in spans.get_finished_spans() if s.name == "runtime.native start"]

    try:
        await until(natives, bool)  # the Runtime got the delivery and made its native call
    finally:
        await rt.stop()
    await asyncio.sleep(0.2)  # the last send spans end at their acks

    finished = spans.get_finished_spans()
    post = [s for s in finished if s.name == "POST /v1/sessions"]
    assert len(post) == 1
    deliver = [s for s in finished if s.name == "dispatcher.deliver" and s.attributes
               and s.attributes["session_core.session_id"] == sid]
    assert len(deliver) == 1, deliver
    by_id = {s.context.span_id: s for s in finished}
    path = [(s.name, service(s).removeprefix("session-core-"))
            for s in chain(by_id, deliver[0])]
    assert path[0] == ("POST /v1/sessions", "admission"), path
    assert deliver[0].context.trace_id == post[0].context.trace_id
    # its parent is the stored input's consume, ended long before (the input waited there)
    assert path[-2:] == [(f"process {system.topics.session_stored}", "dispatcher"),
                         ("dispatcher.deliver", "dispatcher")], path
    native = [s for s in finished if s.name == "runtime.native start"]
    assert [s.context.trace_id for s in native] == [post[0].context.trace_id]


async def test_a_waiting_posts_trace_shows_its_answer_and_items_arriving(
        spans: InMemorySpanExporter, make_system: SystemFactory) -> None:
    """``POST /v1/sessions?wait=true``: storage's answer and the Turn's Items reach the request
    through admission's tails, each a ``process <topic>`` span of admission in the POST's trace
    (services/admission/tails.py), the child of the ``send`` span storage made of the record."""
    system = await make_system()
    assert system.http is not None
    t = system.topics
    rt = RuntimeService(system.settings, RuntimeConfig(
        runtime_id=f"rt_{uuid.uuid4().hex}", harness="claude_code", placements=["none"],
        turn_idle_s=5.0))
    await rt.start()
    try:
        r = await system.http.post("/v1/sessions?wait=true&timeout_ms=20000", json={
            "harness": "claude_code", "placement": "none", "input": "hello"})
        assert r.status_code == 200, r.text
        sid = r.json()["id"]
    finally:
        await rt.stop()
    await asyncio.sleep(0.2)

    finished = spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    (post,) = [s for s in finished if s.name == "POST /v1/sessions"]
    handed = [s for s in finished if service(s) == "session-core-admission"
              and s.name in (f"process {t.storage_replies}", f"process {t.session_items}")]
    replies = [s for s in handed if s.name == f"process {t.storage_replies}"]
    items = [s for s in handed if s.name == f"process {t.session_items}"]
    assert len(replies) == 1 and items, [s.name for s in handed]
    for s in handed:
        assert s.context.trace_id == post.context.trace_id, s.name
        assert s.kind == SpanKind.CONSUMER
        path = [(p.name, service(p).removeprefix("session-core-")) for p in chain(by_id, s)]
        assert path[0] == ("POST /v1/sessions", "admission"), path
        assert path[-2][0].startswith("send ") and path[-2][1] == "storage", path
    assert {s.attributes["session_core.session_id"] for s in items  # type: ignore[index]
            } == {sid}
    # the Turn's end, which answered the wait, is among them
    assert "turn" in {s.attributes["session_core.item.type"]  # type: ignore[index]
                      for s in items}

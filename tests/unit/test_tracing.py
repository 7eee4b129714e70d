"""Tracing (shared/tracing.py): off unless the OTEL_* variables name an exporter; the W3C
headers a record carries; what a publish sends with tracing off (unchanged) and on; trace ids in
log lines; the live drivers' native call spans; the chart's OTEL_* block."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from runtimes.live import session_worker
from runtimes.traces import TRACES
from shared import tracing
from shared.kafka import JSON_HEADERS, send_counted
from tests.support.helm import helm_template, render

REPO = Path(__file__).resolve().parents[2]


# --- on or off: the standard variables -----------------------------------------------------


@pytest.mark.parametrize(("env", "exporters"), [
    ({}, []),  # off by default: no exporter, no collector tried
    ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_SAMPLER": "always_on"}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "console, none"}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, []),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, []),
])
def test_exporters_from_the_standard_variables(env: dict[str, str], exporters: list[str]
                                               ) -> None:
    assert tracing.exporters_from(env) == exporters


def test_a_misnamed_exporter_or_protocol_is_refused() -> None:
    with pytest.raises(tracing.TracingConfigError, match="zipkin"):
        tracing.exporters_from({"OTEL_TRACES_EXPORTER": "zipkin"})
    with pytest.raises(tracing.TracingConfigError, match="grpc"):
        tracing.configure({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert not tracing.ON


def test_off_no_tracer_and_a_publish_sends_what_it_always_sent() -> None:
    assert not tracing.configure({})
    assert tracing.tracer("storage") is None
    sent: list[Any] = []

    class Producer:
        async def send(self, topic: str, value: bytes, key: bytes | None, headers: Any) -> Any:
            sent.append(headers)
            fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            fut.set_result(None)
            return fut

    asyncio.run(send_counted(Producer(), "t", b"{}", b"k"))  # type: ignore[arg-type,unused-ignore]
    assert sent == [JSON_HEADERS]


def test_on_each_service_is_its_own_resource(spans: InMemorySpanExporter,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("admission", "runtime"):
        t = tracing.tracer(name)
        assert t is not None
        t.start_span("x").end()
    got = [(s.resource.attributes["service.name"], s.resource.attributes["service.namespace"])
           for s in spans.get_finished_spans()]
    assert got == [("session-core-admission", "session-core"),
                   ("session-core-runtime", "session-core")]
    monkeypatch.setenv("OTEL_SERVICE_NAME", "core-eu-1")
    again = InMemorySpanExporter()
    tracing.enable(SimpleSpanProcessor(again))  # fresh providers
    t = tracing.tracer("storage")
    assert t is not None
    t.start_span("y").end()
    (last,) = again.get_finished_spans()
    assert last.resource.attributes["service.name"] == "core-eu-1"
    assert last.resource.attributes["session_core.service"] == "storage"


# --- the headers --------------------------------------------------------------------------------


def test_a_send_span_travels_in_the_headers_and_parents_the_consumer(
        spans: InMemorySpanExporter) -> None:
    t = tracing.tracer("storage")
    assert t is not None
    span, headers = tracing.start_send(t, "session.items", b"session_1")
    names = [k for k, _ in headers]
    assert names == ["traceparent"]  # no tracestate when the trace has none
    ctx = span.get_span_context()
    version, trace_id, span_id, flags = dict(headers)["traceparent"].decode().split("-")
    assert (version, trace_id, span_id) == ("00", f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}")
    assert int(flags, 16) & 1  # sampled
    span.end()
    record = SimpleNamespace(topic="session.items", key=b"session_1", partition=2, offset=7,
                             headers=[("content-type", b"application/json"), *headers])
    with tracing.consuming(tracing.tracer("dispatcher"), record):
        pass
    sent, got = spans.get_finished_spans()
    assert (sent.name, sent.kind) == ("send session.items", SpanKind.PRODUCER)
    assert (got.name, got.kind) == ("process session.items", SpanKind.CONSUMER)
    assert got.parent is not None and got.parent.is_remote
    assert got.parent.span_id == sent.context.span_id
    assert got.context.trace_id == sent.context.trace_id
    assert got.attributes is not None
    assert got.attributes["messaging.destination.partition.id"] == "2"
    assert got.attributes["messaging.kafka.offset"] == 7


def test_tracestate_goes_along_and_a_malformed_traceparent_is_none() -> None:
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ctx = tracing.context_of([("traceparent", tp.encode()), ("tracestate", b"vendor=1")])
    assert ctx is not None
    carried = tracing.headers_of(trace.get_current_span(ctx))
    assert dict(carried) == {"traceparent": tp.encode(), "tracestate": b"vendor=1"}
    assert tracing.context_of([("traceparent", b"00-zz-not-a-context")]) is None
    assert tracing.context_of([("content-type", b"application/json")]) is None
    assert tracing.context_of(None) is None


def test_a_traced_publish_adds_the_headers_and_ends_at_the_ack(
        spans: InMemorySpanExporter) -> None:
    sent: list[Any] = []

    async def run() -> None:
        loop = asyncio.get_running_loop()
        ack: asyncio.Future[Any] = loop.create_future()

        class Producer:
            async def send(self, topic: str, value: bytes, key: bytes | None,
                           headers: Any) -> Any:
                sent.append(headers)
                return ack

        fut = await send_counted(Producer(), "core.facts", b"{}", b"s",  # type: ignore[arg-type,unused-ignore]
                                 tracing.tracer("receipts"))
        assert spans.get_finished_spans() == ()  # open until Kafka acknowledged the record
        ack.set_result(None)
        await fut

    asyncio.run(run())
    (span,) = spans.get_finished_spans()
    assert span.name == "send core.facts"
    assert [k for k, _ in sent[0]] == ["content-type", "traceparent"]


# --- logs -----------------------------------------------------------------------------------------

SCRIPT = """
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from shared import tracing
from shared.logging import configure_logging, get_logger
tracing.enable(SimpleSpanProcessor(InMemorySpanExporter()))
configure_logging("INFO", "json", service="probe")
log = get_logger("probe")
with tracing.span(tracing.tracer("storage"), "work") as s:
    c = s.get_span_context()
    print(f"{c.trace_id:032x} {c.span_id:016x}", flush=True)
    log.info("probe.inside")
log.info("probe.outside")
"""


def test_a_log_line_inside_a_span_carries_its_trace_and_span_ids() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT],
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=60, check=True)
    trace_id, span_id = out.stdout.split()
    lines = {d["event"]: d for d in map(json.loads, out.stderr.splitlines())}
    assert lines["probe.inside"]["trace_id"] == trace_id
    assert lines["probe.inside"]["span_id"] == span_id
    assert "trace_id" not in lines["probe.outside"]


# --- the live drivers' native call ----------------------------------------------------------------


def test_a_live_session_workers_native_call_is_a_child_of_its_delivery(
        spans: InMemorySpanExporter) -> None:
    TRACES.use(tracing.tracer("runtime"))
    seen: list[Any] = []
    delivery = {"delivery_id": "dlv_1", "session_id": "s1", "kind": "start"}

    async def run() -> None:
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        with tracing.span(TRACES.tracer, "process runtime.deliveries"):
            TRACES.received(delivery)
        inbox.put_nowait(delivery)
        inbox.put_nowait({**delivery, "delivery_id": "dlv_2", "kind": "function_result",
                          "call_id": "c1"})

        both = asyncio.Event()

        async def messages(d: Any) -> None:
            seen.append(trace.get_current_span())

        async def result(d: Any) -> None:
            seen.append(trace.get_current_span())
            both.set()

        async def nothing(d: Any) -> None: ...

        task = asyncio.create_task(session_worker(inbox, messages, result, nothing,
                                                  lambda d, why: None, repr))
        await asyncio.wait_for(both.wait(), 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(run())
    finished = {s.name: s for s in spans.get_finished_spans()}
    process, native = finished["process runtime.deliveries"], finished["runtime.native start"]
    assert native.parent is not None and native.parent.span_id == process.context.span_id
    assert seen[0].get_span_context().span_id == native.context.span_id
    # the next delivery ended the first's span; the second's has no delivery context kept
    # here, and is its own span all the same
    assert seen[1].get_span_context().span_id != native.context.span_id
    assert native.attributes is not None and native.attributes["session_core.engine"] == "real"
    # what the harness prints next for the Session goes on in its last native call
    assert TRACES.parent_of("s1") is not None


# --- the chart ------------------------------------------------------------------------------------


def _env(doc: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in doc["spec"]["template"]["spec"]["containers"]]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def test_the_chart_sets_no_otel_variable_by_default() -> None:
    deployments = [d for d in render() if d["kind"] == "Deployment"]
    assert deployments
    for d in deployments:
        assert not [k for k in _env(d) if k.startswith("OTEL_")], d["metadata"]["name"]


def test_the_chart_tracing_block_sets_the_standard_variables() -> None:
    docs = render("--set=tracing.enabled=true",
                  "--set=tracing.endpoint=http://otel-collector.obs:4318",
                  "--set=tracing.headersSecret.name=otlp", "--set=tracing.headersSecret.key=h")
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployments) == 4
    for d in deployments:
        component = d["metadata"]["labels"]["app.kubernetes.io/component"]
        env = _env(d)
        assert env["OTEL_TRACES_EXPORTER"] == "otlp"
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.obs:4318"
        assert env["OTEL_SERVICE_NAME"] == f"session-core-{component}"
        assert env["OTEL_TRACES_SAMPLER"] == "parentbased_traceidratio"
        assert env["OTEL_EXPORTER_OTLP_HEADERS"] == {"secretKeyRef": {"name": "otlp",
                                                                      "key": "h"}}
        # what the services make of them: on, with the OTLP exporter
        assert tracing.exporters_from(env) == ["otlp"]
    out = helm_template("--set=image.repository=r/sc", "--set=tracing.enabled=true")
    assert out.returncode != 0 and "tracing.endpoint" in out.stderr


CONSOLE = """
from shared import tracing
assert tracing.configure({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
assert tracing.ON and tracing.tracer("admission") is not None  # no span: nothing is sent
assert tracing.configure({"OTEL_TRACES_EXPORTER": "console"})
tracing.tracer("storage").start_span("to the console").end()
tracing.disable()  # flushes the batch processor
assert tracing.tracer("storage") is None
"""


def test_configure_builds_the_exporters_the_variables_name() -> None:
    out = subprocess.run([sys.executable, "-c", CONSOLE],
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=60, check=True)
    printed = json.loads(out.stdout)
    assert printed["name"] == "to the console"
    assert printed["resource"]["attributes"]["service.name"] == "session-core-storage"

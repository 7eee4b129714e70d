"""The live drivers' spans with the real ``claude`` and ``codex app-server`` binaries against the
scripted model server
(runtimes/traces.py; docs/operations.md, "Tracing"): each delivery handed to the real
process is a ``runtime.native <kind>`` span (``session_core.engine`` ``real``), the child of
its delivery's ``process runtime.deliveries`` span, and what the real harness prints on its own
time goes on in the Session's last native call — the function call in the ``start``'s, the
Turn's end in the ``function_result``'s. Without Kafka: deliveries are handed to the driver as
the Runtime's delivery loop does (``deliveries.DeliveryLoop.handle_raw``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runtimes.claude import process as claude_process
from runtimes.claude.live import ClaudeLive
from runtimes.codex.live import CodexLive
from runtimes.harness import Emit
from runtimes.live import LiveHarness, LiveOptions, default_binary
from runtimes.traces import TRACES
from scripted_model.server import ModelServer
from shared import tracing
from shared.domain.observations import CallOpened, TurnEnded, classify_all
from tests.integration.test_claude_live import Sink, start, t
from tests.support.skips import unavailable

Json = dict[str, Any]


@pytest.fixture
def spans(spans: InMemorySpanExporter) -> InMemorySpanExporter:
    """tests/conftest.py's, with the Runtime's traces on (these tests drive a harness directly)."""
    TRACES.use(tracing.tracer("runtime"))
    return spans


class TracedSink(Sink):
    """What the harness printed, with the span id its observation would go on in
    (``TRACES.parent_of``, as the Runtime's observation outbox asks)."""

    def __init__(self) -> None:
        super().__init__()
        self.parents: dict[int, int] = {}  # id(record) → parent span id

    def __call__(self, emits: list[Emit]) -> None:
        for e in emits:
            ctx = TRACES.parent_of(str(e.record.get("session_id")))
            self.parents[id(e.record)] = trace.get_current_span(ctx).get_span_context().span_id
        super().__call__(emits)


def installed(harness: str) -> bool:
    try:
        if harness == "codex":
            default_binary("codex")
            return True
        return Path(claude_process.default_binary()).exists()
    except FileNotFoundError:
        return False


@pytest.fixture(params=["claude_code", "codex"])
async def harness(request: pytest.FixtureRequest, model: ModelServer, tmp_path: Path,
                  spans: InMemorySpanExporter) -> AsyncIterator[tuple[LiveHarness, TracedSink]]:
    name: str = request.param
    if not installed(name):  # pragma: no cover - the install step puts both in the cache
        unavailable(f"{name} is not installed (python3 -m deploy.local.stack install)")
    h: LiveHarness
    if name == "codex":
        h = CodexLive(LiveOptions(runtime_id="rt_test", harness="codex",
                                  model_base_url=model.url + "/v1", work_dir=tmp_path))
    else:
        h = ClaudeLive(LiveOptions(runtime_id="rt_test", harness="claude_code",
                                   model_base_url=model.url, work_dir=tmp_path))
    sink = TracedSink()
    await h.start(sink)
    yield h, sink
    await h.stop()


def call_of(r: Json) -> CallOpened | None:
    facts = [f for f in classify_all(r["harness"], r.get("native")) if isinstance(f, CallOpened)]
    return facts[0] if facts else None


def turn_end(r: Json) -> bool:
    return any(isinstance(f, TurnEnded) for f in classify_all(r["harness"], r.get("native")))


async def deliver(h: LiveHarness, d: Json) -> int:
    """``d`` handed to the driver inside its ``process runtime.deliveries`` span; that span's
    id."""
    assert TRACES.tracer is not None
    with tracing.span(TRACES.tracer, "process runtime.deliveries") as s:
        assert s is not None
        TRACES.received(d)
        await h.handle(d)
    return s.get_span_context().span_id


async def test_a_real_harness_native_calls_are_children_of_their_deliveries(
        harness: tuple[LiveHarness, TracedSink], model: ModelServer,
        spans: InMemorySpanExporter) -> None:
    h, sink = harness
    k = f"LIVE-{uuid.uuid4().hex[:8]}"
    model.scripts.register(k, [[{"tool_call": {"name": "get_weather",
                                               "arguments": {"city": "Oslo"}}}],
                               [{"text": "thanks"}]])
    opening = start("session_t", "turn_1", t(f"{k} weather?"))
    first = await deliver(h, opening)
    call_rec = await sink.wait(lambda r: call_of(r) is not None)
    call = call_of(call_rec)
    assert call is not None
    result = {"runtime_id": "rt_test", "delivery_id": "dlv_r1", "session_id": "session_t",
              "turn_id": "turn_1", "kind": "function_result", "call_id": call.call_id,
              "name": "get_weather", "success": True, "content": [t("sunny")]}
    second = await deliver(h, result)
    end = await sink.wait(turn_end)

    natives = {s.name: s for s in spans.get_finished_spans()
               if s.name.startswith("runtime.native ")}
    # each ends once its delivery is handed over (the worker takes the next): both ended here
    native_start, native_result = (natives["runtime.native start"],
                                   natives["runtime.native function_result"])
    for native, parent, d in ((native_start, first, opening), (native_result, second, result)):
        assert native.parent is not None and native.parent.span_id == parent
        assert native.attributes is not None
        assert (native.attributes["session_core.engine"],
                native.attributes["session_core.delivery_id"]) == ("real", d["delivery_id"])
    assert native_result.attributes is not None
    assert native_result.attributes["session_core.call_id"] == call.call_id
    # what the real harness printed on its own time: the call in the start's native call, the
    # Turn's end in the function result's (not all in the first: the process's reader was made
    # in the start's native call, and must not carry it: traces.own_time)
    assert sink.parents[id(call_rec)] == native_start.context.span_id
    assert sink.parents[id(end)] == native_result.context.span_id

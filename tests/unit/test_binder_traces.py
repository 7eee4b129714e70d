"""A delivery goes on in the trace of the input it carries, however late it is made: an input
that waits for a Runtime keeps its W3C context with its pending entry, and the sweeper, or the
delivery of a later input that finds it queued, delivers it (or fails it after the bind wait)
under that context, not under whatever span is current then (docs/operations.md, "Tracing").
On the binder's in-memory fakes, spans to an in-memory exporter."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, Tracer

from shared import tracing
from shared.domain import wire
from tests.support.fakes.dispatcher import FakeOutbox
from tests.unit.test_binder import HEARTBEAT_S, WAIT_S, World, stored

Doc = dict[str, Any]


class TracedOutbox(FakeOutbox):
    """The fake outbox, noting the span current at each delivery and fact."""

    def __init__(self) -> None:
        super().__init__()
        self.parents: list[tuple[str, str, SpanContext]] = []  # (what, event/kind, context)

    async def deliver(self, runtime_id: str, message: Doc) -> None:
        self.parents.append(("deliver", message["delivery_id"],
                             trace.get_current_span().get_span_context()))
        await super().deliver(runtime_id, message)

    async def publish_fact(self, session_id: str, fact_id: str, body: Doc) -> None:
        self.parents.append(("fact", fact_id, trace.get_current_span().get_span_context()))
        await super().publish_fact(session_id, fact_id, body)


@pytest.fixture
def tracer() -> Iterator[Tracer]:
    tracing.enable(SimpleSpanProcessor(InMemorySpanExporter()))
    try:
        t = tracing.tracer("dispatcher")
        assert t is not None
        yield t
    finally:
        tracing.disable()


@pytest.fixture
def world() -> World:
    w = World()
    w.out = w.binder.out = TracedOutbox()  # type: ignore[assignment]
    return w


def parents(w: World) -> list[tuple[str, str, SpanContext]]:
    out = w.out
    assert isinstance(out, TracedOutbox)
    return out.parents


async def accept_in_span(w: World, t: Tracer, rec: Doc) -> SpanContext:
    """``rec`` accepted under its own ``process session.stored`` span (as app.on_stored does);
    that span's context."""
    with t.start_as_current_span("process session.stored") as s:
        await w.binder.accept(rec)
    return s.get_span_context()


async def test_the_sweeper_delivers_a_waiting_input_in_its_own_trace(
        world: World, tracer: Tracer) -> None:
    rec = stored("s1", "t1", "start")
    came_in = await accept_in_span(world, tracer, rec)  # no Runtime: it waits
    assert world.out.deliveries == []
    pending = list(world.repo.pending_docs.values())
    assert pending[0]["trace"]["traceparent"].split("-")[1] == format(came_in.trace_id, "032x")

    world.register("rt_a")
    await world.binder.sweep()  # no span current: the sweeper's loop
    delivered = [(did, ctx) for what, did, ctx in parents(world) if what == "deliver"]
    assert [did for did, _ in delivered] == [wire.delivery_id(rec["event_id"])]
    ctx = delivered[0][1]  # the child of the span the input came in, not a new trace
    assert (ctx.trace_id, ctx.span_id) == (came_in.trace_id, came_in.span_id)


async def test_a_later_input_delivers_the_queued_one_in_the_queued_ones_trace(
        world: World, tracer: Tracer) -> None:
    """The Runtime registers, and the next stored input (read before the sweeper's pass)
    finds the first queued: each is delivered in the trace it came in."""
    first, second = stored("s1", "t1", "start"), stored("s1", "t1", "steer")
    first_ctx = await accept_in_span(world, tracer, first)
    world.register("rt_a")
    second_ctx = await accept_in_span(world, tracer, second)
    delivered = [ctx for what, _did, ctx in parents(world) if what == "deliver"]
    assert [m["kind"] for _, m in world.out.deliveries] == ["start", "steer"]
    assert [(c.trace_id, c.span_id) for c in delivered] == [
        (first_ctx.trace_id, first_ctx.span_id), (second_ctx.trace_id, second_ctx.span_id)]
    assert first_ctx.trace_id != second_ctx.trace_id


async def test_a_rebound_session_gets_its_queued_input_in_its_trace(
        world: World, tracer: Tracer) -> None:
    """Its Runtime gone, an input queues; the sweeper rebinds the Session to another Runtime
    and delivers it there, in the input's trace."""
    world.register("rt_a")
    await accept_in_span(world, tracer, stored("s1", "t1", "start"))
    world.clock.advance(HEARTBEAT_S + 1)  # rt_a stops heartbeating: gone
    came_in = await accept_in_span(world, tracer, stored("s1", "t2", "start"))
    world.register("rt_b")
    await world.binder.sweep()
    assert [rid for rid, m in world.out.deliveries] == ["rt_a", "rt_b"]
    ctx = [c for what, _d, c in parents(world) if what == "deliver"][-1]
    assert (ctx.trace_id, ctx.span_id) == (came_in.trace_id, came_in.span_id)


async def test_an_input_that_waited_too_long_fails_in_its_trace(
        world: World, tracer: Tracer) -> None:
    rec = stored("s1", "t1", "start")
    came_in = await accept_in_span(world, tracer, rec)
    world.clock.advance(WAIT_S + 1)
    await world.binder.sweep()
    failed = [c for what, fid, c in parents(world)
              if what == "fact" and fid == f"dsp:refuse:{rec['event_id']}:turn"]
    assert [(c.trace_id, c.span_id) for c in failed] == [(came_in.trace_id, came_in.span_id)]


async def test_tracing_off_keeps_no_trace(world: World) -> None:
    await world.binder.accept(stored("s1", "t1", "start"))
    assert [p.get("trace") for p in world.repo.pending_docs.values()] == [None]
    assert tracing.carrier() is None and tracing.kept({"traceparent": "x"}) is None

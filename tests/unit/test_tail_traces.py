"""Admission's tails (services/admission/tails.py), tracing on: a record handed to a waiter — a
storage answer to the request that waits for it, an Item to its Session's streams and waits — is
a CONSUMER span ``process <topic>``, the child of the context the record's ``traceparent``
carries, so the waiting request's trace shows its answer arriving; a record nobody waits for
makes no span. In-memory exporter, records fed by hand."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from services.admission.tails import ItemTail, ReplyTail
from shared import records, tracing
from shared.settings import Settings

SID = "session_" + "b" * 32


def sent(topic: str, key: bytes) -> tuple[Any, SimpleNamespace]:
    """A ``send`` span (storage's) and a record of ``topic`` carrying it in its headers."""
    t = tracing.tracer("storage")
    assert t is not None
    span, headers = tracing.start_send(t, topic, key)
    span.end()
    return span, SimpleNamespace(topic=topic, key=key, partition=0, offset=3,
                                 headers=[("content-type", b"application/json"), *headers])


def item() -> dict[str, Any]:
    return records.item_record({
        "id": "item_" + "a" * 32, "session_id": SID, "sequence": 1, "type": "turn",
        "created_at": "2026-11-30T10:00:00Z", "turn_id": "turn_1", "state": "completed",
        "reason": None}, "acme")


async def test_an_answer_handed_to_its_request_is_a_child_of_the_records_send(
        spans: InMemorySpanExporter) -> None:
    tail = ReplyTail(Settings(), "t.storage.replies", dlq=None,  # type: ignore[arg-type]
                     tracer=tracing.tracer("admission"))
    fut = tail.expect("req_1")
    send, record = sent("t.storage.replies", b"req_1")
    tail.dispatch({"request_id": "req_1", "status": 201}, record)
    assert (await asyncio.wait_for(fut, 1))["status"] == 201
    # nobody waits for this one (another replica's request): no span
    _, other = sent("t.storage.replies", b"req_2")
    tail.dispatch({"request_id": "req_2", "status": 201}, other)
    got = [s for s in spans.get_finished_spans() if s.name.startswith("process ")]
    assert [(s.name, s.kind) for s in got] == [("process t.storage.replies", SpanKind.CONSUMER)]
    (handed,) = got
    assert handed.parent is not None and handed.parent.is_remote
    assert handed.parent.span_id == send.get_span_context().span_id
    assert handed.context.trace_id == send.get_span_context().trace_id
    assert handed.attributes is not None
    assert handed.attributes["session_core.request_id"] == "req_1"
    assert handed.resource.attributes["service.name"] == "session-core-admission"


async def test_an_item_handed_to_its_sessions_listeners_is_one_span(
        spans: InMemorySpanExporter) -> None:
    tail = ItemTail(Settings(), "t.session.items", dlq=None,  # type: ignore[arg-type]
                    tracer=tracing.tracer("admission"))
    waits = [tail.listen(SID), tail.listen(SID)]  # a ?wait and an SSE stream
    send, record = sent("t.session.items", SID.encode())
    tail.dispatch(item(), record)
    assert [q.get_nowait()["state"] for q in waits] == ["completed", "completed"]
    tail.unlisten(SID, waits[0])
    tail.unlisten(SID, waits[1])
    _, unheard = sent("t.session.items", SID.encode())
    tail.dispatch(item(), unheard)  # no listener left: no span
    got = [s for s in spans.get_finished_spans() if s.name.startswith("process ")]
    assert len(got) == 1
    assert got[0].parent is not None and got[0].parent.span_id == send.get_span_context().span_id
    assert got[0].attributes is not None
    assert (got[0].attributes["session_core.session_id"],
            got[0].attributes["session_core.listeners"],
            got[0].attributes["session_core.item.type"]) == (SID, 2, "turn")


def test_tracing_off_or_a_value_without_its_record_makes_no_span(
        spans: InMemorySpanExporter) -> None:
    tail = ItemTail(Settings(), "t.session.items", dlq=None)  # type: ignore[arg-type]
    q = tail.listen(SID)
    _, record = sent("t.session.items", SID.encode())
    tail.dispatch(item(), record)  # no tracer: off
    traced = ItemTail(Settings(), "t.session.items", dlq=None,  # type: ignore[arg-type]
                      tracer=tracing.tracer("admission"))
    q2 = traced.listen(SID)
    traced.dispatch(item())  # by hand, no record
    assert q.get_nowait() and q2.get_nowait()
    assert [s.name for s in spans.get_finished_spans()] == ["send t.session.items"]

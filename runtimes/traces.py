"""The Runtime's side of tracing (``shared.tracing``; on only when the process turned it on):
which trace each delivery and each Session's harness output belong to.

* Each delivery addressed to this Runtime is read in a ``process runtime.deliveries`` span
  (``deliveries.DeliveryLoop``), child of the dispatcher's ``send``; its context is kept by
  ``delivery_id``.
* The native call — the simulated harness's ``handle``, or a live driver's write of the input or
  function result to its process (``live.session_worker``, through ``NativeCalls``) — is a
  ``runtime.native <kind>`` span, child of its delivery's; it becomes the Session's current
  context.
* What the harness prints goes out (``outbox.ObservationOutbox``) in ``send
  runtime.observations`` spans, children of the native call current when it was queued (the
  simulated harness) or of the Session's last native call (a live harness prints on its own:
  its readers are made outside any span, ``own_time``).

Keyed by ``delivery_id`` and ``session_id`` (unique), so one registry serves every Runtime of a
process; bounded FIFO caches, filled only while tracing is on."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from cachetools import FIFOCache
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.trace import Span, Tracer

from shared import tracing

T = TypeVar("T")
KEPT = 16_384  # deliveries and Sessions remembered (a few hundred bytes each)


class RuntimeTraces:
    def __init__(self) -> None:
        self.tracer: Tracer | None = None
        self.deliveries: FIFOCache[str, Context] = FIFOCache(maxsize=KEPT)
        self.sessions: FIFOCache[str, Context] = FIFOCache(maxsize=KEPT)

    def use(self, tracer: Tracer | None) -> None:
        """The tracer of the Runtime being made (``None``: tracing off, nothing is kept)."""
        self.tracer = tracer
        if tracer is None:
            self.deliveries.clear()
            self.sessions.clear()

    def received(self, delivery: Mapping[str, Any]) -> None:
        """The current span (the delivery's ``process`` span) is ``delivery``'s context."""
        ctx = tracing.current()
        if ctx is not None:
            self.deliveries[str(delivery.get("delivery_id"))] = ctx

    def start_native(self, delivery: Mapping[str, Any], engine: str) -> Span | None:
        """The ``runtime.native <kind>`` span of handing ``delivery`` to the harness, child of
        the delivery's context; it becomes its Session's. ``None`` when tracing is off."""
        t = self.tracer
        if t is None:
            return None
        did = str(delivery.get("delivery_id"))
        parent = self.deliveries.pop(did, None) or tracing.current()
        attrs = {"session_core.engine": engine, "session_core.delivery_id": did,
                 "session_core.session_id": str(delivery.get("session_id")),
                 "session_core.delivery.kind": str(delivery.get("kind"))}
        if delivery.get("call_id") is not None:
            attrs["session_core.call_id"] = str(delivery.get("call_id"))
        span = t.start_span(f"runtime.native {delivery.get('kind')}", context=parent,
                            attributes=attrs)
        self.sessions[str(delivery.get("session_id"))] = tracing.in_context(span) or Context()
        return span

    def parent_of(self, session_id: str) -> Context | None:
        """An observation's parent: the native call current now, else the Session's last."""
        return tracing.current() or self.sessions.get(session_id)


TRACES = RuntimeTraces()


def own_time(coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """A task for what a live harness's process prints on its own time (its output reader),
    made outside the span current here: a task copies the context it is made in, and a reader
    made in the native call that spawned the process would put everything the process ever
    prints in that one call's trace. Outside any span, ``parent_of`` gives the Session's last
    native call."""
    token = otel_context.attach(Context())
    try:
        return asyncio.create_task(coro, name=name)
    finally:
        otel_context.detach(token)


class NativeCalls:
    """A live Session worker's native call spans: ``next`` ends the previous delivery's span,
    takes the next delivery and starts its span, current in the worker until the next call."""

    def __init__(self, engine: str = "real") -> None:
        self.engine = engine
        self.span: Span | None = None
        self.token: object | None = None

    async def next(self, inbox: Any) -> Any:
        self.end()
        d = await inbox.get()
        if TRACES.tracer is not None:
            self.span = TRACES.start_native(d, self.engine)
            if self.span is not None:
                self.token = otel_context.attach(tracing.in_context(self.span) or Context())
        return d

    def end(self) -> None:
        if self.token is not None:
            otel_context.detach(self.token)  # type: ignore[arg-type]
            self.token = None
        if self.span is not None:
            self.span.end()
            self.span = None

"""OpenTelemetry tracing, once: whether it is on, each service's tracer, and the one way a trace
context crosses Kafka — the W3C ``traceparent`` (and ``tracestate``) record headers, written by
``shared.kafka``'s publishing functions and read back by every consumer through
``consuming`` / ``context_of`` (docs/operations.md, "Tracing").

Off by default. ``configure`` reads the standard ``OTEL_*`` variables at a process's start:
tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``) or an OTLP
endpoint is set, and ``OTEL_SDK_DISABLED`` is not ``true``. Off, ``tracer`` returns ``None``:
every helper here then does nothing and the publishing functions send the same headers as
before, so a record costs one ``is None`` test. The sampler (``OTEL_TRACES_SAMPLER``, default
parent-based always-on), the batch processor (``OTEL_BSP_*``) and the exporter
(``OTEL_EXPORTER_OTLP_*``) read their own variables.

Each service has its own ``TracerProvider`` whose resource names it (``service.name`` =
``OTEL_SERVICE_NAME``, else ``session-core-<service>``): in production one process is one
service; the tests run the four services and a Runtime in one process and still see five."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
NAMESPACE = "session-core"
# W3C Trace Context only, whatever OTEL_PROPAGATORS says: the records' headers are a contract
# (docs/asyncapi.json declares traceparent and tracestate), not a per-deployment choice.
PROPAGATOR = TraceContextTextMapPropagator()
EXPORTERS = ("otlp", "console", "none")

ON = False  # read by the hot paths and the log processor: nothing else is looked at when off
_processors: list[Any] = []
_providers: dict[str, Any] = {}  # service → its TracerProvider


class TracingConfigError(ValueError):
    """An ``OTEL_*`` variable names something this process cannot export to."""


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def exporters_from(environ: Mapping[str, str]) -> list[str]:
    """The exporters the standard variables ask for; none means tracing is off. Unset,
    ``OTEL_TRACES_EXPORTER`` means ``otlp`` only where an OTLP endpoint is set (the
    specification's default is ``otlp`` everywhere; Core's is off, so that a process never
    tries to reach a collector nobody configured)."""
    if _truthy(environ.get("OTEL_SDK_DISABLED")):
        return []
    named = environ.get("OTEL_TRACES_EXPORTER")
    if named is None or not named.strip():
        endpoint = (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
        return ["otlp"] if endpoint else []
    out = []
    for name in (n.strip().lower() for n in named.split(",")):
        if name not in EXPORTERS:
            raise TracingConfigError(f"OTEL_TRACES_EXPORTER: {name!r} is not one of "
                                     f"{', '.join(EXPORTERS)}")
        if name != "none" and name not in out:
            out.append(name)
    return out


def configure(environ: Mapping[str, str] | None = None) -> bool:
    """Tracing on or off for this process from the ``OTEL_*`` variables (called once at a
    process's start, before its services are made); whether it is on."""
    env = os.environ if environ is None else environ
    names = exporters_from(env)
    if not names:
        return False
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    processors = []
    for name in names:
        if name == "otlp":
            protocol = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
            if protocol != "http/protobuf":
                raise TracingConfigError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r}; this "
                                         "image exports OTLP over http/protobuf only")
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )

            processors.append(BatchSpanProcessor(OTLPSpanExporter()))
        else:
            processors.append(BatchSpanProcessor(ConsoleSpanExporter()))
    enable(*processors)
    return True


def enable(*processors: Any) -> None:
    """Tracing on, spans to ``processors`` (SDK span processors). ``configure`` calls it;
    tests call it with an in-memory exporter before they make the services."""
    global ON
    disable()
    _processors.extend(processors)
    ON = True


def disable() -> None:
    """Tracing off; the providers made so far are shut down (their spans flushed)."""
    global ON
    ON = False
    for provider in _providers.values():
        provider.shutdown()
    _providers.clear()
    _processors.clear()


def service_name(service: str, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return env.get("OTEL_SERVICE_NAME") or f"{NAMESPACE}-{service}"


def tracer(service: str) -> Tracer | None:
    """``service``'s tracer (``admission``, ``storage``, ``dispatcher``, ``receipts``,
    ``runtime``), or ``None`` when tracing is off. Call when the service is made."""
    if not ON:
        return None
    provider = _providers.get(service)
    if provider is None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider

        attributes = {"service.namespace": NAMESPACE, "session_core.service": service}
        if not os.environ.get("OTEL_SERVICE_NAME"):
            attributes["service.name"] = service_name(service)
        # the sampler comes from OTEL_TRACES_SAMPLER / _ARG (default: parentbased_always_on)
        provider = TracerProvider(resource=Resource.create(attributes))
        for p in _processors:
            provider.add_span_processor(p)
        _providers[service] = provider
    t: Tracer = provider.get_tracer("session_core")
    return t


# --- propagation: Kafka record headers -----------------------------------------------------------

Headers = list[tuple[str, bytes]]


def headers_of(span: Span) -> Headers:
    """``span``'s context as record headers (``traceparent``, ``tracestate`` when it has one).
    A sampled-out span's context travels too (flags ``00``): the consumers' parent-based
    samplers drop the rest of its trace as well."""
    carrier: dict[str, str] = {}
    PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return [(k, v.encode()) for k, v in carrier.items()]


def context_of(headers: Sequence[tuple[str, bytes | None]] | None) -> Context | None:
    """The remote parent a record's headers carry, or ``None``."""
    if not headers:
        return None
    carrier = {k: v.decode("latin-1") for k, v in headers
               if v is not None and k in (TRACEPARENT, TRACESTATE)}
    if TRACEPARENT not in carrier:
        return None
    ctx = PROPAGATOR.extract(carrier)
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None  # a malformed traceparent: as if there were none
    return ctx


def http_context(headers: Mapping[str, str]) -> Context | None:
    """The remote parent of an HTTP request (its ``traceparent`` / ``tracestate``)."""
    tp = headers.get(TRACEPARENT)
    if tp is None:
        return None
    carrier = {TRACEPARENT: tp}
    ts = headers.get(TRACESTATE)
    if ts is not None:
        carrier[TRACESTATE] = ts
    ctx = PROPAGATOR.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def _kafka(topic: str, operation: str, key: bytes | None = None,
           partition: int | None = None, offset: int | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = {"messaging.system": "kafka", "messaging.destination.name": topic,
                             "messaging.operation.type": operation,
                             "messaging.operation.name": operation}
    if key is not None:
        attrs["messaging.kafka.message.key"] = key.decode("utf-8", "replace")[:200]
    if partition is not None:
        attrs["messaging.destination.partition.id"] = str(partition)
    if offset is not None:
        attrs["messaging.kafka.offset"] = offset
    return attrs


def start_send(t: Tracer, topic: str, key: bytes | None, parent: Context | None = None
               ) -> tuple[Span, Headers]:
    """A PRODUCER span ``send <topic>`` (child of ``parent``, else of the current span) and the
    headers that carry it; the caller ends it once the record is acknowledged."""
    span = t.start_span(f"send {topic}", context=parent, kind=SpanKind.PRODUCER,
                        attributes=_kafka(topic, "send", key))
    return span, headers_of(span)


def end_on_ack(span: Span) -> Any:
    """A done-callback for a send's future: ends ``span``, failed if the send failed."""
    def done(fut: Any) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if fut.cancelled() or exc is not None:
            fail(span, exc)
        span.end()
    return done


def fail(span: Span, exc: BaseException | None) -> None:
    if exc is not None and isinstance(exc, Exception):
        span.record_exception(exc)
    span.set_status(Status(StatusCode.ERROR, repr(exc)[:200] if exc else "cancelled"))


def start_consume(t: Tracer, record: Any, **attributes: Any) -> Span:
    """A CONSUMER span ``process <topic>`` for one record, child of the context its headers
    carry (a new trace when they carry none)."""
    attrs = _kafka(record.topic, "process", record.key, record.partition, record.offset)
    attrs.update(attributes)
    return t.start_span(f"process {record.topic}", context=context_of(record.headers),
                        kind=SpanKind.CONSUMER, attributes=attrs)


OFF: AbstractContextManager[None] = nullcontext()  # what the helpers below give when off


def consuming(t: Tracer | None, record: Any, **attributes: Any
              ) -> AbstractContextManager[Span | None]:
    """``start_consume``'s span, current for the block (ended at its end; an exception marks
    it failed). Nothing when ``t`` is ``None`` (tracing off)."""
    if t is None:
        return OFF
    return trace.use_span(start_consume(t, record, **attributes), end_on_exit=True)


def span(t: Tracer | None, name: str, attributes: Mapping[str, Any] | None = None,
         parent: Context | None = None, kind: SpanKind = SpanKind.INTERNAL
         ) -> AbstractContextManager[Span | None]:
    """An INTERNAL (or ``kind``) span ``name``, current for the block, child of ``parent``
    (else of the current span). Nothing when ``t`` is ``None``."""
    if t is None:
        return OFF
    return t.start_as_current_span(name, context=parent, kind=kind,
                                   attributes=dict(attributes or {}))


def within(ctx: Context | None) -> AbstractContextManager[Any]:
    """``ctx`` current for the block (a remote parent carried by a record, to be the parent of
    the spans its handling makes); nothing when ``None``."""
    return OFF if ctx is None else _attached(ctx)


@contextmanager
def _attached(ctx: Context) -> Iterator[None]:
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def current() -> Context | None:
    """The current span's context when one is recording, else ``None`` (to keep for later)."""
    s = trace.get_current_span()
    return trace.set_span_in_context(s) if s.get_span_context().is_valid else None


def in_context(s: Span | None) -> Context | None:
    return None if s is None else trace.set_span_in_context(s)


def carrier() -> dict[str, str] | None:
    """The current span's W3C context (``traceparent``, ``tracestate``) to keep with work done
    later, in another task or process (the dispatcher's pending inputs, in the store); ``None``
    when tracing is off or no span is current."""
    if not ON:
        return None
    s = trace.get_current_span()
    if not s.get_span_context().is_valid:
        return None
    out: dict[str, str] = {}
    PROPAGATOR.inject(out, trace.set_span_in_context(s))
    return out


def kept(c: Mapping[str, Any] | None) -> Context | None:
    """The context a ``carrier`` kept, to be the parent of what is done with it now; ``None``
    when tracing is off or nothing (valid) was kept."""
    if not ON or not c:
        return None
    return http_context({k: v for k, v in c.items()
                         if k in (TRACEPARENT, TRACESTATE) and isinstance(v, str)})


def log_ids(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
    """structlog processor: ``trace_id`` and ``span_id`` of the current span on every line
    logged inside one (only when tracing is on)."""
    if ON:
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            event.setdefault("trace_id", format(ctx.trace_id, "032x"))
            event.setdefault("span_id", format(ctx.span_id, "016x"))
    return event

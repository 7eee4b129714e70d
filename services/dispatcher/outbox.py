"""The binder's way out, over Kafka."""

from __future__ import annotations

from faststream.kafka import KafkaBroker
from opentelemetry.trace import Tracer

from services.dispatcher.binder import Doc
from shared import records, tracing
from shared.kafka import publish


class KafkaOutbox:
    """Facts go to storage (the single Item writer) on ``core.facts``; deliveries go to the
    Runtimes on ``runtime.deliveries``, keyed by Runtime. With a tracer (tracing on) each
    delivery is a ``dispatcher.deliver`` span around its ``send`` span, children of the span
    current where the binder decided it (the stored input's ``process`` span)."""

    def __init__(self, broker: KafkaBroker, facts: str, deliveries: str,
                 tracer: Tracer | None = None) -> None:
        self.broker, self.facts, self.deliveries = broker, facts, deliveries
        self.tracer = tracer

    async def publish_fact(self, session_id: str, fact_id: str, body: Doc) -> None:
        await publish(self.broker, self.facts, records.fact_record(session_id, fact_id, body),
                      session_id, self.tracer)

    async def deliver(self, runtime_id: str, message: Doc) -> None:
        if self.tracer is None:
            await publish(self.broker, self.deliveries, message, runtime_id)
            return
        with tracing.span(self.tracer, "dispatcher.deliver", {
                "session_core.runtime_id": runtime_id,
                "session_core.session_id": str(message.get("session_id")),
                "session_core.delivery.kind": str(message.get("kind")),
                "session_core.delivery_id": str(message.get("delivery_id"))}):
            await publish(self.broker, self.deliveries, message, runtime_id, self.tracer)

"""The binder's way out, over Kafka."""

from __future__ import annotations

from faststream.kafka import KafkaBroker

from services.dispatcher.binder import Doc
from shared import records
from shared.kafka import publish


class KafkaOutbox:
    """Facts go to storage (the single Item writer) on ``core.facts``; deliveries go to the
    Runtimes on ``runtime.deliveries``, keyed by Runtime."""

    def __init__(self, broker: KafkaBroker, facts: str, deliveries: str) -> None:
        self.broker, self.facts, self.deliveries = broker, facts, deliveries

    async def publish_fact(self, session_id: str, fact_id: str, body: Doc) -> None:
        await publish(self.broker, self.facts, records.fact_record(session_id, fact_id, body),
                      session_id)

    async def deliver(self, runtime_id: str, message: Doc) -> None:
        await publish(self.broker, self.deliveries, message, runtime_id)

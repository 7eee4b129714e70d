"""What each of the four Core services is connected to, made in one place: its settings and
topics, a broker (its producer and its subscribers), a store client and database, and the DLQ of
its topics. The services' subscribers, stated in each ``app.py``, stay theirs."""

from __future__ import annotations

from faststream.kafka import KafkaBroker

from shared.kafka import DeadLetters, broker_send, make_broker
from shared.settings import Settings
from shared.store import database, make_client
from shared.topics import topics_for


class CoreService:
    def __init__(self, settings: Settings, client_id: str,
                 store_selection_ms: int = 5_000) -> None:
        self.settings = settings
        self.topics = topics_for(settings)
        self.broker: KafkaBroker = make_broker(settings, client_id)
        self.client = make_client(settings, store_selection_ms)
        self.db = database(self.client, settings)
        self.dlq = DeadLetters(broker_send(self.broker), self.topics)

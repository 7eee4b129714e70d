"""What each of the four Core services is connected to, made in one place: its settings and
topics, a broker (its producer and its subscribers), a store client and database, the DLQ of
its topics and its tracer; the way every one of them subscribes, and the readiness of the ones
that wait for nothing else. The services' subscribers, stated in each ``app.py``, stay theirs."""

from __future__ import annotations

from typing import Any

from faststream import AckPolicy
from faststream.kafka import KafkaBroker

from shared import tracing
from shared.kafka import (
    FETCH_MAX_WAIT_MS,
    DeadLetters,
    broker_ping,
    broker_send,
    make_broker,
    max_record_bytes,
)
from shared.service import raw_decoder
from shared.settings import Settings
from shared.store import database, make_client, ping
from shared.topics import topics_for


class CoreService:
    def __init__(self, settings: Settings, client_id: str, service: str,
                 store_selection_ms: int = 5_000) -> None:
        self.settings = settings
        self.topics = topics_for(settings)
        # this service's spans (shared.tracing); None when tracing is off
        self.tracer = tracing.tracer(service)
        self.broker: KafkaBroker = make_broker(settings, client_id)
        self.client = make_client(settings, store_selection_ms)
        self.db = database(self.client, settings, service)  # its own collections' database
        self.dlq = DeadLetters(broker_send(self.broker, self.tracer), self.topics,
                               max_record_bytes(settings))

    def subscriber(self, *topics: str, group: str, **options: Any) -> Any:
        """A subscriber of ``topics`` in this deployment's consumer group ``group``, read as every
        Core service reads: from the earliest record when the group has no offset, records as
        large as the topics take, fetches held at most ``FETCH_MAX_WAIT_MS``, decoded by the
        handler (``raw_decoder``: a malformed one goes to the DLQ with its reason), offsets
        committed once the handler returned (an exception rewinds: ``NACK_ON_ERROR``) unless
        ``options`` say otherwise (storage commits behind its batches: ``AckPolicy.MANUAL``).
        ``options``: the subscriber's own (batches, a listener, the ack policy)."""
        options.setdefault("ack_policy", AckPolicy.NACK_ON_ERROR)
        return self.broker.subscriber(
            *topics, group_id=self.topics.group(group), auto_offset_reset="earliest",
            max_partition_fetch_bytes=max_record_bytes(self.settings),
            fetch_max_wait_ms=FETCH_MAX_WAIT_MS,
            decoder=raw_decoder, **options)

    async def ready(self) -> bool:
        """The store and the broker answer (a service that waits for more says so)."""
        return await ping(self.client) and await broker_ping(self.broker)

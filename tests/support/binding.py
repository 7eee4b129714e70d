"""For tests that play the dispatcher: the ``binding`` fact that tells storage which Runtime a
Session is bound to. Storage takes a Session's observations only from that Runtime
(docs/security.md, "Observations only from the bound Runtime"), so a test that publishes
observations without a dispatcher publishes this first."""

from __future__ import annotations

import uuid
from typing import Any

from aiokafka import AIOKafkaProducer

from shared import records
from shared.kafka import client_security, encode
from shared.settings import Settings
from shared.topics import topics_for


def binding_fact(session_id: str, runtime_id: str) -> dict[str, Any]:
    """The ``core.fact/1`` the dispatcher publishes when it binds ``session_id``."""
    return records.fact_record(session_id, f"dsp:bind:{session_id}:{runtime_id}:{uuid.uuid4().hex}",
                               {"kind": "binding", "status": "bound", "runtime_id": runtime_id,
                                "reason": None})


async def bind(settings: Settings, session_id: str, runtime_id: str) -> None:
    """Publish ``binding_fact`` (acked) on ``core.facts``, keyed by the Session."""
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap_servers, acks="all",
                                **client_security(settings))
    await producer.start()
    try:
        await producer.send_and_wait(topics_for(settings).core_facts,
                                     encode(binding_fact(session_id, runtime_id)),
                                     key=session_id.encode())
    finally:
        await producer.stop()

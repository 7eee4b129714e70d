"""admission — the HTTP API (CONTRACT §1) and the ``session.input`` topic, answering on
``session.input.results`` by ``request_id``. Both entry points call the same ``Admission``."""

from __future__ import annotations

import asyncio
from types import FrameType
from typing import Any

import uvicorn
from faststream import AckPolicy
from faststream.kafka import KafkaBroker
from faststream.kafka.annotations import KafkaMessage

from services.admission.core import Admission, Answer, body_too_large
from services.admission.http import build_http_app
from services.admission.tails import ItemTail, ReplyTail
from shared import records
from shared.domain import errors
from shared.domain.jsonbody import parse_json
from shared.domain.poison import INVALID_FIELDS, UNDECODABLE, Poison
from shared.domain.tenancy import DEFAULT_TENANT, TENANT_RE, is_tenant
from shared.kafka import (
    DeadLetters,
    broker_send,
    broker_watch,
    ensure_topics,
    make_broker,
    max_record_bytes,
    publish,
)
from shared.logging import bound, get_logger
from shared.service import raw_decoder
from shared.settings import Settings
from shared.store import database, make_client, store_watch
from shared.topics import topics_for

log = get_logger(__name__)
GROUP = "session-core-admission"
ENVELOPE = ("op", "request_id", "session_id", "schema", "tenant")


class _Server(uvicorn.Server):
    """uvicorn handles SIGTERM itself and then waits for requests in flight: waiting requests
    are told first, so they answer 202 with their Items so far instead of holding the exit."""

    def __init__(self, config: uvicorn.Config, closing: asyncio.Event) -> None:
        super().__init__(config)
        self.closing = closing
        self.loop = asyncio.get_running_loop()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.loop.call_soon_threadsafe(self.closing.set)
        super().handle_exit(sig, frame)


class AdmissionService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = topics_for(settings)
        self.broker: KafkaBroker = make_broker(settings, "session-core-admission")
        self.client = make_client(settings, settings.store_request_timeout_ms)
        self.db = database(self.client, settings)
        self.dlq = DeadLetters(broker_send(self.broker), self.topics)
        self.replies = ReplyTail(settings, self.topics.storage_replies, self.dlq)
        self.items = ItemTail(settings, self.topics.session_items, self.dlq)
        self.watches = (store_watch(self.client), broker_watch(self.broker))
        self.admission = Admission(settings, self.topics, self.broker, self.db, self.replies,
                                   self.items, self.watches)
        self.http = build_http_app(settings, lambda: self.admission, self.ready)
        self.server: uvicorn.Server | None = None
        self.server_task: asyncio.Task[None] | None = None
        self.broker.subscriber(
            self.topics.session_input,
            group_id=self.topics.group(GROUP),
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=max_record_bytes(settings),
            ack_policy=AckPolicy.NACK_ON_ERROR,
            decoder=raw_decoder,
        )(self.on_input)

    async def on_input(self, body: Any, msg: KafkaMessage) -> None:
        """One ``session.input`` record → the same answer the HTTP API would give. A record
        that cannot be answered (not JSON, not an object, no string ``request_id``) is poison;
        one that can is answered, with a 400 when it is not a valid request."""
        raw: Any = msg.raw_message
        value = parse_json(raw.value or b"")
        if isinstance(value, errors.ApiError):
            await self.dlq.record(raw, Poison(UNDECODABLE, value.message))
            return
        if not isinstance(value, dict) or not isinstance(value.get("request_id"), str):
            await self.dlq.record(raw, Poison(
                UNDECODABLE if not isinstance(value, dict) else INVALID_FIELDS,
                "no string request_id: the answer could not be addressed"))
            return
        rid = value["request_id"]
        with bound(request_id=rid):
            if len(raw.value or b"") > self.settings.max_body_bytes:
                answer = Answer.error(body_too_large(self.settings.max_body_bytes))
            else:
                answer = await self.answer_input(value)
            await publish(self.broker, self.topics.session_input_results,
                          {"schema": records.INPUT_RESULT, "request_id": rid,
                           "status": answer.status, "body": answer.body}, rid)

    async def answer_input(self, value: dict[str, Any]) -> Answer:
        op = value.get("op")
        body = {k: v for k, v in value.items() if k not in ENVELOPE}
        # Producers of session.input are trusted by Kafka ACLs: a record names its tenant, or
        # belongs to the default tenant (docs/security.md).
        tenant = value.get("tenant", DEFAULT_TENANT)
        if not is_tenant(tenant):
            return Answer.error(errors.invalid(
                f"tenant must match {TENANT_RE.pattern}", "tenant"))
        if op == records.OP_CREATE:
            return await self.admission.create_session(body, tenant=tenant)
        if op == records.OP_EVENT:
            sid = value.get("session_id")
            if not isinstance(sid, str):
                return Answer.error(errors.invalid("session_id is required", "session_id"))
            return await self.admission.add_event(sid, body, tenant=tenant)
        return Answer.error(errors.invalid(
            "op must be 'sessions.create' or 'events.create'", "op"))

    async def ready(self) -> bool:
        # through the watches: what readiness finds, the next hand-over goes by
        store, broker = self.watches
        return self.replies.ready.is_set() and await store.check() and await broker.check()

    async def start(self, serve_http: bool = True) -> None:
        await ensure_topics(self.settings, self.topics)
        await self.replies.start()
        await self.items.start()
        await self.broker.start()
        if serve_http:
            config = uvicorn.Config(
                self.http, host=self.settings.http_host, port=self.settings.http_port,
                log_config=None, access_log=False, lifespan="off",
            )
            self.server = _Server(config, self.http.state.closing)
            self.server_task = asyncio.create_task(self.server.serve())
            while not self.server.started:
                if self.server_task.done():
                    await self.server_task
                    raise RuntimeError("HTTP server did not start")
                await asyncio.sleep(0.02)
        log.info("admission.started", port=self.settings.http_port)

    async def stop(self) -> None:
        if self.server is not None and self.server_task is not None:
            self.http.state.closing.set()  # waiting requests answer 202 now
            self.server.should_exit = True
            await self.server_task
        await self.broker.stop()
        await self.replies.stop()
        await self.items.stop()
        await self.client.close()

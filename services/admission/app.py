"""admission — the HTTP API (CONTRACT §1) and the ``session.input`` topic, answering on
``session.input.results`` by ``request_id``. Both entry points call the same ``Admission``."""

from __future__ import annotations

import asyncio
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
from shared.kafka import ensure_topics, make_broker, max_record_bytes, publish, to_dlq
from shared.logging import bound, get_logger
from shared.service import raw_decoder
from shared.settings import Settings
from shared.store import StoreWatch, database, make_client, ping
from shared.topics import topics_for

log = get_logger(__name__)
GROUP = "session-core-admission"
ENVELOPE = ("op", "request_id", "session_id", "schema")


class AdmissionService:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = topics_for(settings)
        self.broker: KafkaBroker = make_broker(settings, "session-core-admission")
        self.client = make_client(settings, settings.store_request_timeout_ms)
        self.db = database(self.client, settings)
        self.replies = ReplyTail(settings, self.topics.storage_replies)
        self.items = ItemTail(settings, self.topics.session_items)
        self.admission = Admission(settings, self.topics, self.broker, self.db, self.replies,
                                   self.items, StoreWatch(self.client))
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
        """One ``session.input`` record → the same answer the HTTP API would give."""
        raw: Any = msg.raw_message
        value = parse_json(raw.value or b"")
        rid = None
        if isinstance(value, dict) and isinstance(value.get("request_id"), str):
            rid = value["request_id"]
        if rid is None:
            await to_dlq(self.broker, self.topics, raw.topic, raw.value or b"",
                         "no request_id: the answer could not be addressed", raw.key)
            return
        with bound(request_id=rid):
            if len(raw.value or b"") > self.settings.max_body_bytes:
                answer = Answer.error(body_too_large(self.settings.max_body_bytes))
            else:
                answer = await self.answer_input(value)
            await publish(self.broker, self.topics.session_input_results,
                          {"schema": records.INPUT_RESULT, "request_id": rid,
                           "status": answer.status, "body": answer.body}, rid)

    async def answer_input(self, value: Any) -> Answer:
        if isinstance(value, errors.ApiError):
            return Answer.error(value)
        op = value.get("op")
        body = {k: v for k, v in value.items() if k not in ENVELOPE}
        if op == records.OP_CREATE:
            return await self.admission.create_session(body)
        if op == records.OP_EVENT:
            sid = value.get("session_id")
            if not isinstance(sid, str):
                return Answer.error(errors.invalid("session_id is required", "session_id"))
            return await self.admission.add_event(sid, body)
        return Answer.error(errors.invalid(
            "op must be 'sessions.create' or 'events.create'", "op"))

    async def ready(self) -> bool:
        return (self.replies.ready.is_set() and await ping(self.client)
                and await self.broker.ping(timeout=2.0))

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
            self.server = uvicorn.Server(config)
            self.server_task = asyncio.create_task(self.server.serve())
            while not self.server.started:
                if self.server_task.done():
                    await self.server_task
                    raise RuntimeError("HTTP server did not start")
                await asyncio.sleep(0.02)
        log.info("admission.started", port=self.settings.http_port)

    async def stop(self) -> None:
        if self.server is not None and self.server_task is not None:
            self.server.should_exit = True
            await self.server_task
        await self.broker.stop()
        await self.replies.stop()
        await self.items.stop()
        await self.client.close()

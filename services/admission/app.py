"""admission — the HTTP API (CONTRACT §1) and the ``session.input`` topic, answering on
``session.input.results`` by ``request_id``. Both entry points call the same ``Admission``
(``core.py``): the routes are ``routes.py``'s (served by ``http.py``'s app), the topic's
reading ``inputs.py``'s."""

from __future__ import annotations

import asyncio
from typing import Any

from faststream.kafka.annotations import KafkaMessage

from services.admission import inputs
from services.admission.core import Admission
from services.admission.http import build_http_app
from services.admission.serving import HttpServer
from services.admission.tails import ItemTail, ReplyTail
from shared import tracing
from shared.coreservice import CoreService
from shared.domain.poison import WRONG_TENANT, Poison
from shared.failures import settle
from shared.kafka import broker_watch, ensure_topics, make_producer, publish
from shared.logging import bound, get_logger
from shared.service import StopSteps
from shared.settings import Settings
from shared.store import store_watch

log = get_logger(__name__)
GROUP = "session-core-admission"


class AdmissionService(CoreService):
    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, GROUP, "admission", settings.store_request_timeout_ms)
        self.replies = ReplyTail(settings, self.topics.storage_replies, self.dlq, self.tracer)
        self.items = ItemTail(settings, self.topics.session_items, self.dlq, self.tracer)
        self.watches = (store_watch(self.client), broker_watch(self.broker))
        self.producer = make_producer(settings, "admission")  # the hand-over to storage
        self.admission = Admission(settings, self.topics, self.producer, self.db, self.replies,
                                   self.items, self.watches, self.tracer)
        self.http = build_http_app(settings, lambda: self.admission, self.ready, self.tracer)
        self.server: HttpServer | None = None
        # the shared input topic and each tenant's own (SESSION_CORE_INPUT_TENANTS)
        self.subscriber(self.topics.session_input,
                        *(self.topics.tenant_input(t) for t in self.topics.tenants),
                        group=GROUP)(self.on_input)

    async def on_input(self, body: Any, msg: KafkaMessage) -> None:
        """One ``session.input`` record → the same answer the HTTP API would give, or the DLQ
        when it cannot be addressed."""
        raw: Any = msg.raw_message
        if self.tracer is None:
            await self._on_input(raw)
            return
        with tracing.consuming(self.tracer, raw):
            await self._on_input(raw)

    async def _on_input(self, raw: Any) -> None:
        # a large record is parsed in the child parser, as a large HTTP body (parsing.py)
        value = inputs.addressed_value(await self.http.state.parser.parse(raw.value or b""))
        if isinstance(value, Poison):
            await self.dlq.record(raw, value)
            return
        rid = value["request_id"]
        size = len(raw.value or b"")
        # on a tenant's own input topic the tenant is the topic's; the answer goes to its own
        # results topic (docs/security.md, "Tenants on Kafka")
        tenant = self.topics.input_tenant(raw.topic)
        results = self.topics.input_results(raw.topic)
        forged = inputs.wrong_tenant(value, tenant)
        if forged is not None:  # answered 400 below (its producer learns why), and kept
            log.warning("admission.input_wrong_tenant", topic=raw.topic)
            await self.dlq.record(raw, Poison(WRONG_TENANT, forged))

        async def answer(values: list[dict[str, Any]]) -> None:
            for v in values:
                got = await inputs.answer(self.admission, v, size, self.settings.max_body_bytes,
                                          topic_tenant=tenant)
                await publish(self.broker, results, inputs.result(rid, got), rid, self.tracer)

        with bound(request_id=rid[:128]):
            # an answer that can never be published (too large for the results topic) goes
            # to the DLQ; the store or the broker away: retried (shared/failures.py)
            await settle(self.dlq, [(raw, value)], answer, what="admission.session_input")

    async def ready(self) -> bool:
        # through the watches: what readiness finds, the next hand-over goes by
        store, broker = self.watches
        return self.replies.ready.is_set() and await store.check() and await broker.check()

    async def start(self, serve_http: bool = True) -> None:
        await ensure_topics(self.settings, self.topics)
        # the parser's child interpreter (~0.8 s to spawn) starts alongside the Kafka clients;
        # the subscriber starts last, once what its handler uses is up
        await asyncio.gather(self.replies.start(), self.items.start(), self.producer.start(),
                             *([self.http.state.parser.start()] if serve_http else []))
        await self.broker.start()
        if serve_http:
            self.server = HttpServer(self.http, self.settings.http_host, self.settings.http_port)
            await self.server.start()
        log.info("admission.started", port=self.settings.http_port)

    async def stop(self) -> None:
        steps = StopSteps()
        if self.server is not None:
            await steps.run("http", self.server.stop())
        await steps.run("subscriber", self.broker.stop())
        await steps.run("producer", self.producer.stop())
        await steps.run("replies", self.replies.stop())
        await steps.run("items", self.items.stop())
        await steps.run("store", self.client.close())
        self.admission.images.close()
        self.http.state.parser.close()
        steps.log()

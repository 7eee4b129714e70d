"""Kafka plumbing, once: the FastStream broker factory, topic creation, record encoding and the
dead-letter queue. Every producer is acks=all + idempotent; every consumer names its group and
commits a record's offset only after the handler returned, its work durable
(``AckPolicy.NACK_ON_ERROR`` at the subscriber: an exception rewinds to the record, which is
read again)."""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import json
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError, TopicAlreadyExistsError
from aiokafka.partitioner import DefaultPartitioner, murmur2
from faststream.kafka import KafkaBroker
from faststream.kafka.prometheus import KafkaPrometheusMiddleware
from faststream.security import (
    BaseSecurity,
    SASLPlaintext,
    SASLScram256,
    SASLScram512,
)
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Tracer
from prometheus_client import REGISTRY, Counter

from shared import tracing
from shared.domain.poison import Poison
from shared.logging import get_logger
from shared.messages import schemas
from shared.metrics import count_acked
from shared.settings import Settings
from shared.topics import Existing, TopicPlan, Topics, declared_topics, plan_topics
from shared.watch import Watch

log = get_logger(__name__)
DYNAMIC_TOPIC_CONFIG = 1  # DescribeConfigs config_source: set on the topic itself

# A record may carry a whole admitted request (images inline), so the size cap follows the body
# limit. Topics are created with max.message.bytes set to this, producers and consumers agree.
def max_record_bytes(settings: Settings) -> int:
    return settings.max_body_bytes * 2 + 1024 * 1024


# --- security: the one place Kafka clients get TLS and SASL (docs/deploy.md) --------------------
# FastStream's broker takes a ``BaseSecurity`` (``security``); the plain aiokafka clients (topic
# admin, tails, the reference runtime) take the same settings as keyword arguments
# (``client_security``). Both read the ``kafka_*`` settings through ``_ssl_context``.


def _ssl_context(settings: Settings) -> ssl.SSLContext | None:
    if settings.kafka_security_protocol.upper() not in ("SSL", "SASL_SSL"):
        return None
    ctx = ssl.create_default_context(cafile=settings.kafka_ssl_cafile)
    if settings.kafka_ssl_certfile:  # mutual TLS: the client's certificate and key
        ctx.load_cert_chain(settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile)
    return ctx


def security(settings: Settings) -> BaseSecurity | None:
    """The FastStream broker's security (``make_broker``)."""
    proto = settings.kafka_security_protocol.upper()
    if proto == "PLAINTEXT":
        return None
    ctx = _ssl_context(settings)
    if proto == "SSL":
        return BaseSecurity(ssl_context=ctx, use_ssl=True)
    user, password = settings.kafka_sasl_username or "", settings.kafka_sasl_password or ""
    mech = (settings.kafka_sasl_mechanism or "PLAIN").upper()
    cls = {"PLAIN": SASLPlaintext, "SCRAM-SHA-256": SASLScram256, "SCRAM-SHA-512": SASLScram512}[
        mech
    ]
    return cls(username=user, password=password, ssl_context=ctx)


# Hashes of the keys seen last, one cache per process (the hash is a pure function of the key,
# so every producer of the process shares it): ~250 B an entry with its key, ~4 MB when full
# (tracemalloc, 40-byte keys).
KEY_HASHES = 16_384
_key_hash: Callable[[bytes], int] = functools.lru_cache(maxsize=KEY_HASHES)(murmur2)
_keyless = DefaultPartitioner()


class KeyPartitioner:
    """aiokafka's ``DefaultPartitioner`` — Java's murmur2 of the key, so a key lands where every
    Kafka client puts it — with the hashes of the last ``KEY_HASHES`` keys remembered.
    aiokafka's murmur2 is pure Python, ~12 µs a record; every record here is keyed by
    ``session_id`` (or ``request_id``, ``runtime_id``), and the keys of a busy moment repeat.
    Keyless records go to ``DefaultPartitioner`` unchanged. Same partition as
    ``DefaultPartitioner`` for every key and partition count
    (tests/unit/test_kafka_partitioner.py)."""

    def __call__(self, key: bytes | None, all_partitions: list[int],
                 available: list[int]) -> int:
        if key is None:
            return int(_keyless(key, all_partitions, available))
        return all_partitions[(_key_hash(key) & 0x7FFFFFFF) % len(all_partitions)]


def make_broker(settings: Settings, client_id: str) -> KafkaBroker:
    return KafkaBroker(
        settings.kafka_bootstrap_servers,
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        linger_ms=2,
        partitioner=KeyPartitioner(),
        max_request_size=max_record_bytes(settings),
        security=security(settings),
        graceful_timeout=15.0,
        # faststream_received_messages_total, …_published_messages_total, processing durations
        middlewares=(KafkaPrometheusMiddleware(registry=REGISTRY, app_name=client_id),),
        # FastStream's per-message "Received/Processed" lines go to DEBUG; errors stay visible.
        log_level=logging.DEBUG,
    )


# Bytes of records per partition a produce request may carry. aiokafka keeps one request in
# flight per broker; records sent meanwhile wait in the next batch of their partition, and
# ``send`` itself waits once that batch is full. At aiokafka's default (16 KiB, ~40 Items of a
# verdict) a storage batch of 233 verdicts over 6 partitions handed its Items over in 19 ms, one
# of 120 in 6 ms: its Items waited for produce round trips (docs/decisions.md, "Producer batches
# of 1 MiB"). 1 MiB holds a batch's records, and
# stays below every topic's max.message.bytes (``max_record_bytes``: 1 MiB + twice the largest
# body; tests/unit/test_kafka_producer_batches.py).
PRODUCER_BATCH_BYTES = 1 << 20
# The linger of a producer that hands a whole batch's records over at once and then awaits their
# acks (storage's). aiokafka's sender runs only once the hand-over yields, so the batch's records
# are queued by then; a linger only held that request back, 2 ms of every batch's cycle (and
# records sent while a request is in flight still go together in the next). Measured with the
# receipts and pipeline cases (docs/decisions.md, "Storage's producer has no linger").
HANDOVER_LINGER_MS = 0


def make_producer(settings: Settings, client_id: str, *, linger_ms: int = 2) -> AIOKafkaProducer:
    """A plain aiokafka producer with the broker's guarantees (acks=all, idempotent, same record
    size): for a hot path that publishes many records a batch, where FastStream's per-publish
    wrapper (middlewares, message building) costs several times aiokafka's own ``send``."""
    return AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        linger_ms=linger_ms,
        max_batch_size=PRODUCER_BATCH_BYTES,
        partitioner=KeyPartitioner(),
        max_request_size=max_record_bytes(settings),
        **client_security(settings),
    )


JSON_HEADERS = [("content-type", b"application/json")]


# --- publishing: every record Core sends goes through one of the functions below, which also
# carry the trace context (shared.tracing: a ``send <topic>`` span, ``traceparent`` /
# ``tracestate`` headers) when the caller passes its tracer. Tracing off, the tracer is None and
# a record costs one ``is None`` test.


async def send_counted(producer: AIOKafkaProducer, topic: str, value: bytes, key: bytes | None,
                       tracer: Tracer | None = None, parent: Context | None = None
                       ) -> asyncio.Future[Any]:
    """Hand one JSON record to a plain producer (``make_producer``) without awaiting its ack;
    the returned future resolves once Kafka acknowledged it, and ``KAFKA_PUBLISHED`` counts it
    then (the hot paths' one way to publish and to count). With ``tracer``: a ``send <topic>``
    span, child of ``parent`` (else of the current span), ended at the ack, its context in the
    record's headers."""
    if tracer is None:
        fut: asyncio.Future[Any] = await producer.send(topic, value, key=key,
                                                       headers=JSON_HEADERS)
        fut.add_done_callback(count_acked(topic))
        return fut
    span, trace_headers = tracing.start_send(tracer, topic, key, parent)
    try:
        fut = await producer.send(topic, value, key=key, headers=[*JSON_HEADERS, *trace_headers])
    except BaseException as exc:
        tracing.fail(span, exc)
        span.end()
        raise
    fut.add_done_callback(count_acked(topic))
    fut.add_done_callback(tracing.end_on_ack(span))
    return fut


class TopicsDrift(RuntimeError):
    """The cluster's topics differ from the declared ones in a way Kafka cannot change in
    place; ``str()`` says what and what to do, one line per topic."""


async def _existing_topics(admin: AIOKafkaAdminClient, names: list[str],
                           keys: set[str]) -> dict[str, Existing]:
    present = set(await admin.list_topics())
    wanted = [n for n in names if n in present]
    if not wanted:
        return {}
    meta = {t["topic"]: t for t in await admin.describe_topics(wanted)}
    resp = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, n) for n in wanted])
    configs: dict[str, dict[str, str]] = {}
    for r in resp:
        for res in r.to_object()["resources"]:
            if res["error_code"]:
                raise RuntimeError(f"describe configs of {res['resource_name']}: "
                                   f"error {res['error_code']} {res['error_message']}")
            configs[res["resource_name"]] = {
                e["config_names"]: e["config_value"] for e in res["config_entries"]
                if e["config_names"] in keys or e["config_source"] == DYNAMIC_TOPIC_CONFIG}
    out = {}
    for n in wanted:
        parts = meta[n]["partitions"]
        rf = max((len(p["replicas"]) for p in parts), default=0)
        out[n] = Existing(n, len(parts), rf, configs.get(n, {}))
    return out


async def plan_existing(settings: Settings, topics: Topics) -> TopicPlan:
    """The differences between the declared topics and the cluster, changing nothing."""
    declared = declared_topics(settings, topics, max_record_bytes(settings))
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers,
                                **client_security(settings))
    await admin.start()
    try:
        keys = {k for d in declared for k in d.configs}
        return plan_topics(declared, await _existing_topics(admin, [d.name for d in declared],
                                                            keys))
    finally:
        await admin.close()


async def ensure_topics(settings: Settings, topics: Topics, *, strict: bool = False) -> TopicPlan:
    """Make the cluster's topics what the settings declare (``shared.topics.declared_topics``):
    create the missing ones; with ``strict`` (``session-core topics``, the chart's Job) also
    alter the configs that differ (retention, min.insync.replicas, …) and raise
    ``TopicsDrift`` on what Kafka cannot change in place (partition counts, replication
    factors). Services starting with create_topics=true only create and log the drift.
    Skipped when create_topics=false, where the platform provisions topics (the Job)."""
    if not settings.create_topics:
        return TopicPlan([], {}, [])
    declared = declared_topics(settings, topics, max_record_bytes(settings))
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        **client_security(settings),
    )
    await admin.start()
    try:
        keys = {k for d in declared for k in d.configs}
        existing = await _existing_topics(admin, [d.name for d in declared], keys)
        plan = plan_topics(declared, existing)
        if plan.create:
            new = [NewTopic(d.name, num_partitions=d.partitions,
                            replication_factor=d.replication_factor, topic_configs=d.configs)
                   for d in plan.create]
            try:
                await admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass
            for count in {d.partitions for d in plan.create}:
                await wait_for_leaders(settings, [d.name for d in plan.create
                                                  if d.partitions == count], count)
            log.info("topics.created", topics=[d.name for d in plan.create])
        if not strict:
            if plan.errors or plan.alter:
                log.warning("topics.drift", errors=plan.errors, configs=plan.alter,
                            hint="run `session-core topics` to check and fix")
            return plan
        if plan.alter:
            # AlterConfigs replaces a topic's dynamic configs as a whole: keep the others
            resources = [ConfigResource(ConfigResourceType.TOPIC, n,
                                        {**existing[n].configs, **changed})
                         for n, changed in plan.alter.items()]
            for r in await admin.alter_configs(resources):
                for res in r.to_object()["resources"]:
                    if res["error_code"]:
                        raise TopicsDrift(f"altering {res['resource_name']} was refused: error "
                                          f"{res['error_code']} {res['error_message']}")
            for n, changed in plan.alter.items():
                log.info("topics.altered", topic=n,
                         configs={k: [existing[n].configs.get(k), v] for k, v in changed.items()})
        if plan.errors:
            raise TopicsDrift("\n".join(plan.errors))
        return plan
    finally:
        await admin.close()


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """``consumer.stop()``, finished even where aiokafka lets out the cancellation of its own
    fetch: a fetch backing off after a timed-out request is cancelled by the fetcher's
    ``close`` and awaited unguarded, so ``stop()`` raises ``CancelledError`` and skips closing
    its connections (aio-libs/aiokafka#647; seen in CI at the end of a test run, after the
    broker stalled 40 s). That cancellation is not the caller's and is dropped, the client's
    connections closed; a cancellation of the calling task still propagates."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        log.warning("kafka.consumer_stop_cancelled_inside",
                    hint="aiokafka's fetcher let out a fetch's cancellation; connections closed")
        await consumer._client.close()


class _DropNotLeader(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "NotLeaderForPartition" not in record.getMessage()


async def wait_for_leaders(settings: Settings, names: list[str], partitions: int) -> None:
    """Until every partition of the new topics answers an offset request on its leader. A
    consumer that joins a topic created a moment before meets partitions whose leader has not
    taken them up yet: its offset fetches fail with ``NotLeaderForPartitionError``, logged as
    errors by every service at a first start. The probe's own retries of that error are
    expected and not logged. It retries every 20 ms, not aiokafka's 100: the broker takes up new
    partitions within a few hundred ms, and the default backoff stretched the probe of 22 fresh
    topics to 2.3 s (0.4 s at 20 ms) on every first start and every test's System."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.kafka_bootstrap_servers,
                                enable_auto_commit=False, retry_backoff_ms=20,
                                **client_security(settings))
    quiet = _DropNotLeader()
    fetcher_log = logging.getLogger("aiokafka.consumer.fetcher")
    fetcher_log.addFilter(quiet)
    try:
        await consumer.start()
        await consumer.end_offsets([TopicPartition(n, i) for n in names
                                    for i in range(partitions)])
    finally:
        await stop_consumer(consumer)
        fetcher_log.removeFilter(quiet)


def client_security(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for every plain aiokafka client (admin, consumer, producer)."""
    proto = settings.kafka_security_protocol.upper()
    if proto == "PLAINTEXT":
        return {}
    out: dict[str, Any] = {"security_protocol": proto}
    if proto in ("SSL", "SASL_SSL"):
        out["ssl_context"] = _ssl_context(settings)
    if proto.startswith("SASL"):
        out["sasl_mechanism"] = (settings.kafka_sasl_mechanism or "PLAIN").upper()
        out["sasl_plain_username"] = settings.kafka_sasl_username
        out["sasl_plain_password"] = settings.kafka_sasl_password
    return out


# How long the broker may hold a fetch that finds nothing new, for every consumer of Core (its
# services' subscribers, the per-process tails). Not only the idle poll: aiokafka leaves a
# partition whose fetched records are not all consumed yet out of the next fetch request and
# sends no second fetch to a broker while one is out (``Fetcher._get_actions_per_node``), so a
# record appended meanwhile to such a partition waits until that request returns — at
# aiokafka's default of 500 ms, one such wait at the start of a burst of 2 000 verdicts/s put
# storage 0.4 s behind for the rest of it (docs/storage.md, "Fetch wait"). Idle, each consumer
# asks 20 times a second (docs/decisions.md, "Fetch wait: 50 ms in Core").
FETCH_MAX_WAIT_MS = 50


async def assigned_consumer(
    settings: Settings, topic: str, *, at_end: bool, fetch_max_wait_ms: int = FETCH_MAX_WAIT_MS
) -> AIOKafkaConsumer:
    """A consumer without a group, assigned every partition of ``topic`` and positioned at its
    end (``at_end``: only what is published from now on) or its beginning, with positions
    resolved before it is returned — so nothing published after this call can be missed. For
    per-process tails (answers, Items, the registry, control records), never for work that a
    consumer group should share."""
    c = AIOKafkaConsumer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        max_partition_fetch_bytes=max_record_bytes(settings),
        fetch_max_bytes=max_record_bytes(settings) * 2,
        fetch_max_wait_ms=fetch_max_wait_ms,
        **client_security(settings),
    )
    await c.start()
    await assign_all(c, topic, at_end=at_end)
    return c


async def assign_all(c: AIOKafkaConsumer, topic: str, *, at_end: bool) -> list[TopicPartition]:
    """Assigns the started, groupless consumer ``c`` every partition of ``topic`` (waiting up
    to 10 s for the topic's metadata), at their ends or beginnings, positions resolved; the
    partitions, none when the topic never showed up."""
    parts: set[int] | None = None
    for _ in range(100):
        parts = c.partitions_for_topic(topic)
        if parts:
            break
        await c._client.force_metadata_update()
        await asyncio.sleep(0.1)
    tps = [TopicPartition(topic, p) for p in sorted(parts or [])]
    c.assign(tps)
    if at_end:
        await c.seek_to_end(*tps)
    else:
        await c.seek_to_beginning(*tps)
    for tp in tps:
        await c.position(tp)
    return tps


def encode(record: Mapping[str, Any]) -> bytes:
    """JSON, UTF-8, no escaping of non-ASCII: text travels exactly as admitted."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode(raw: bytes) -> Any:
    return json.loads(raw)


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


PING_TIMEOUT_S = 2.0


async def broker_ping(broker: KafkaBroker) -> bool:
    """The broker answers a metadata request naming no topic within ``PING_TIMEOUT_S``.

    FastStream's ``broker.ping`` asks for the metadata of *every* topic in the cluster (the
    admin client's ``describe_cluster``): ~50 ms of CPU a call, on both sides, on a broker with
    thousands of topics, and readiness and admission's broker watch call it once a second. A
    request for no topic (Metadata v1+: an empty list, not null) costs the same whatever the
    cluster holds and still proves the broker answers."""
    try:
        async with asyncio.timeout(PING_TIMEOUT_S):
            await broker.config.admin_client.describe_topics([])
    except Exception:  # any failure means "did not answer"
        return False
    return True


def broker_watch(broker: KafkaBroker, fresh_s: float = 1.0, grace_s: float = 3.0) -> Watch:
    """The broker answered lately (a metadata request within 2 s, and none failing for
    ``grace_s``); ``require()`` raises ``KafkaConnectionError`` (→ 503) instead of letting a
    publish wait on the producer's own timeouts while the broker is away."""
    return Watch(lambda: broker_ping(broker),
                 lambda: KafkaConnectionError("the Kafka broker did not answer"), fresh_s,
                 grace_s)


async def publish(
    broker: KafkaBroker, topic: str, record: Mapping[str, Any], key: str | None,
    tracer: Tracer | None = None,
) -> None:
    """One JSON record through FastStream's publish, acknowledged (with ``tracer``: its
    ``send <topic>`` span, child of the current span)."""
    await broker_send(broker, tracer)(topic, encode(record),
                                      key.encode() if key is not None else None)


DLQ_RECORDS = Counter(
    "session_core_dlq_records_total",
    "Records dead-lettered to <topic>.dlq, by source topic and reason code",
    ["topic", "reason"],
)
Send = Callable[[str, bytes, bytes | None], Awaitable[Any]]


def broker_send(broker: KafkaBroker, tracer: Tracer | None = None) -> Send:
    """Records through FastStream's publish, each acknowledged; with ``tracer``, each in a
    ``send <topic>`` span (child of the current span) carried in its headers."""
    async def send(topic: str, value: bytes, key: bytes | None) -> Any:
        if tracer is None:
            return await broker.publish(value, topic=topic, key=key,
                                        headers={"content-type": "application/json"})
        span, trace_headers = tracing.start_send(tracer, topic, key)
        with trace.use_span(span, end_on_exit=True):
            return await broker.publish(value, topic=topic, key=key, headers={
                "content-type": "application/json",
                **{k: v.decode() for k, v in trace_headers}})
    return send


def producer_send(producer: AIOKafkaProducer, tracer: Tracer | None = None) -> Send:
    """``DeadLetters``' way out on a plain producer: each record sent and acked (with
    ``tracer``, in a ``send <topic>`` span carried in its headers)."""
    async def send(topic: str, value: bytes, key: bytes | None) -> Any:
        if tracer is None:
            return await producer.send_and_wait(topic, value, key=key)
        span, trace_headers = tracing.start_send(tracer, topic, key)
        with trace.use_span(span, end_on_exit=True):
            return await producer.send_and_wait(topic, value, key=key, headers=trace_headers)
    return send


class DeadLetters:
    """The one way a record leaves its topic unprocessed: to ``<topic>.dlq`` with the reason,
    the original bytes (value and key, base64, exactly as read), partition and offset, and one
    increment of ``session_core_dlq_records_total{topic, reason}``. The consumer then moves on
    (a service never crash-loops on one record)."""

    def __init__(self, send: Send, topics: Topics, max_bytes: int = 0) -> None:
        self.send = send
        self.topics = topics
        # the largest DLQ record (the topics' max.message.bytes); 0: no bound
        self.max_bytes = max_bytes

    async def record(self, r: Any, poison: Poison) -> None:
        """A consumed record (aiokafka ``ConsumerRecord``) that is poison."""
        await self.put(r.topic, r.value or b"", poison, key=r.key, partition=r.partition,
                       offset=r.offset)

    async def put(self, source_topic: str, raw: bytes, poison: Poison, *,
                  key: bytes | None = None, partition: int | None = None,
                  offset: int | None = None) -> None:
        envelope = dlq_envelope(source_topic, raw, poison, key=key, partition=partition,
                                offset=offset, max_bytes=self.max_bytes)
        log.warning("dlq.record", source_topic=source_topic, reason=poison.code,
                    detail=poison.detail, partition=partition, offset=offset)
        await self.send(self.topics.dlq(source_topic), encode(envelope), key)
        DLQ_RECORDS.labels(source_topic, poison.code).inc()


# The lossy ``value`` text rides along only with records up to this size: a large one's text
# would double its DLQ record (the base64 is there).
DLQ_TEXT_MAX = 1 << 20
DLQ_ROOM = 64 * 1024  # the envelope's own fields (detail ≤ 300 characters, key twice, …)


def dlq_envelope(source_topic: str, raw: bytes, poison: Poison, *, key: bytes | None,
                 partition: int | None, offset: int | None,
                 max_bytes: int = 0) -> dict[str, Any]:
    """The ``dlq.record/1`` record. The original bytes go whole as base64 when the DLQ record
    still fits the topic (``max_bytes``; ~0.75 of it for the value) — else as many as fit,
    marked ``value_truncated`` with the original length and SHA-256: a record dead-lettered
    for being too large must not fail its own dead-lettering."""
    out: dict[str, Any] = {
        "schema": schemas.DEAD_LETTER,
        "source_topic": source_topic,
        "partition": partition,
        "offset": offset,
        "reason": poison.code,
        "detail": poison.detail,
        "failed_at": now_rfc3339(),
        "key": None, "key_b64": None,
    }
    keep = raw
    budget = (max_bytes - DLQ_ROOM - 2 * len(key or b"")) // 4 * 3 if max_bytes else len(raw)
    if len(raw) > budget:
        keep = raw[:max(budget, 0)]
        out.update(value_truncated=True, value_bytes=len(raw),
                   value_sha256=hashlib.sha256(raw).hexdigest())
    if key is not None and (not max_bytes or len(key) <= max_bytes // 8):
        out["key"] = key.decode("utf-8", "replace")
        out["key_b64"] = base64.b64encode(key).decode()
    out["value_b64"] = base64.b64encode(keep).decode()  # the original bytes, exactly
    if len(raw) <= DLQ_TEXT_MAX:
        text = raw.decode("utf-8", "replace")  # for reading; may be lossy
        room = max_bytes - DLQ_ROOM - len(out["value_b64"]) - 2 * len(key or b"")
        if not max_bytes or len(json.dumps(text, ensure_ascii=False).encode()) <= room:
            out["value"] = text
    return out

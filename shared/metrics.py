"""The Prometheus metrics of the services, in one place (docs/observability.md lists them).
Every service serves them on ``/metrics`` of its metrics port (``SESSION_CORE_HEALTH_PORT``).
Label values are bounded sets (states, kinds, harnesses, command names): never ids or tenants'
free text."""

from __future__ import annotations

import functools
import time
from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from pymongo import monitoring

# buckets up to the longest wait (?wait: 600 s); the short end resolves ordinary requests
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
                900)
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# --- admission: one write admitted (HTTP or session.input), a ?wait's wait for the Turn aside -
ADMISSION_SECONDS = Histogram(
    "session_core_admission_duration_seconds",
    "Seconds to answer one write: validation, idempotency look-up, hand-over to storage and its "
    "stored answer (504 after SESSION_CORE_STORAGE_REPLY_TIMEOUT_MS); a ?wait's wait for the "
    "Turn and the body's upload are not counted. By operation (create_session, add_event)",
    ["operation"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30))

# --- receipts ---------------------------------------------------------------------------------
RECEIPT_VERDICTS = Counter(
    "session_core_receipt_verdicts_total",
    "Application verdicts published by the receipt tracker, by state (applied, failed, "
    "uncertain, …)", ["state"])
RECEIPT_VERDICT_SECONDS = Histogram(
    "session_core_receipt_verdict_seconds",
    "Seconds from a function result's hand-over to the Runtime to its verdict",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120))

# --- dispatch ---------------------------------------------------------------------------------
DISPATCH_BINDINGS = Counter(
    "session_core_dispatch_bindings_total", "Sessions bound to a Runtime, by harness",
    ["harness"])
DISPATCH_REFUSALS = Counter(
    "session_core_dispatch_refusals_total",
    "Inputs the dispatcher refused (the Turn fails), by delivery kind", ["kind"])
DISPATCH_DELIVERIES = Counter(
    "session_core_dispatch_deliveries_total",
    "Deliveries published to runtime.deliveries, by kind (start, steer, function_result, …)",
    ["kind"])
RUNTIMES = Gauge(
    "session_core_runtimes",
    "Runtimes in the dispatcher's registry, by harness and last reported status",
    ["harness", "status"])


RUNTIMES_READY = Gauge(
    "session_core_runtimes_ready",
    "Runtimes that could take a new Session now, by harness: status ready, heartbeat within "
    "SESSION_CORE_RUNTIME_HEARTBEAT_TIMEOUT_S, a bridge protocol Core speaks (0 for a known "
    "harness without one; refreshed every second)", ["harness"])


def set_runtimes(runtimes: Iterable[Any]) -> None:
    """``RUNTIMES`` from the registry's RuntimeInfo values (``harness``, ``status``)."""
    counts = Tally((str(rt.harness), str(rt.status)) for rt in runtimes)
    RUNTIMES.clear()
    for (harness, status), n in counts.items():
        RUNTIMES.labels(harness, status).set(n)


def set_ready_runtimes(counts: Mapping[str, int]) -> None:
    """``RUNTIMES_READY`` from ``services.dispatcher.domain.binding.ready_by_harness``."""
    for harness, n in counts.items():
        RUNTIMES_READY.labels(harness).set(n)


# --- storage ----------------------------------------------------------------------------------
STORAGE_BATCH_RECORDS = Histogram(
    "session_core_storage_batch_records", "Records per consumer batch storage processes",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000))
STORAGE_BATCH_SECONDS = Histogram(
    "session_core_storage_batch_seconds",
    "Seconds to make one batch durable and publish its outputs (store writes included)",
    buckets=FAST_BUCKETS)
STORAGE_COLD_SESSIONS = Counter(
    "session_core_storage_cold_sessions_total",
    "Sessions storage read from the store (not held in memory), by whether it looked for "
    "Items past the document (probed) or trusted it: its shard handed over clean (trusted)",
    ["check"])
STORAGE_SESSIONS_BEHIND = Gauge(
    "session_core_storage_sessions_behind",
    "Sessions whose newest state is journaled but whose document is not written yet")

# --- Kafka: the plain producers (FastStream's brokers count their own publishes) -------------
KAFKA_PUBLISHED = Counter(
    "session_core_kafka_published_records_total",
    "Records Kafka acknowledged on a service's plain producer (admission's hand-over to "
    "storage; storage's Items, stored inputs and answers; the receipt tracker's verdict "
    "facts), by topic", ["topic"])


@functools.cache  # one callback per topic (a bounded set), not one closure per record
def count_acked(topic: str) -> Any:
    """A done-callback for a send's future: counts the record in ``KAFKA_PUBLISHED`` once
    Kafka acknowledged it (``shared.kafka.send_counted``)."""
    counter = KAFKA_PUBLISHED.labels(topic)

    def done(fut: Any) -> None:
        if not fut.cancelled() and fut.exception() is None:
            counter.inc()

    return done


# --- the store (every service): round trips and their latency, by command -------------------
STORE_COMMANDS = Counter(
    "session_core_store_commands_total",
    "Store round trips (MongoDB wire commands), by command and outcome", ["command", "outcome"])
STORE_COMMAND_SECONDS = Histogram(
    "session_core_store_command_duration_seconds",
    "Store round-trip latency by command (insert/update/delete are the writes)", ["command"],
    buckets=FAST_BUCKETS)
# one label per command this project sends; anything else is "other" (bounded labels)
_COMMANDS = frozenset({"insert", "update", "delete", "find", "findAndModify", "aggregate",
                       "getMore", "count", "createIndexes", "ping", "hello", "isMaster",
                       "listCollections", "listIndexes", "endSessions", "killCursors"})


class StoreCommands(monitoring.CommandListener):
    """A PyMongo command listener: every command the client sends is one round trip."""

    def _observe(self, event: Any, outcome: str) -> None:
        name = event.command_name if event.command_name in _COMMANDS else "other"
        STORE_COMMANDS.labels(name, outcome).inc()
        STORE_COMMAND_SECONDS.labels(name).observe(event.duration_micros / 1e6)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self._observe(event, "ok")

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        self._observe(event, "error")


STORE_LISTENER = StoreCommands()


class Stopwatch:
    """``with Stopwatch(HISTOGRAM): …`` observes the block's seconds (also on an exception)."""

    def __init__(self, hist: Histogram) -> None:
        self.hist = hist

    def __enter__(self) -> Stopwatch:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.hist.observe(time.perf_counter() - self.t0)

"""Test-side helpers that drive the real system: the four services in-process on the real
stack, an HTTP client, an Item collector on ``session.items``, and a scriptable test Runtime
that registers over Kafka, receives deliveries and publishes native observations."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from services.admission.app import AdmissionService
from services.dispatcher.app import DispatcherService
from services.receipts.app import ReceiptService
from services.storage.app import StorageService
from shared import sealing
from shared.kafka import decode, encode, ensure_topics, stop_consumer
from shared.sealing import KeyPair
from shared.service import cancel
from shared.settings import Settings
from shared.topics import topics_for

Json = dict[str, Any]
QUIET_S = 2.5  # how long "no delivery arrives" is watched


class ItemCollector:
    """Reads ``session.items`` from the beginning, grouped by session_id. No consumer group: the
    e2e session holds one collector across the whole run, and a group member whose event loop
    sleeps through minutes of synchronous tests loses its membership and, at teardown, spins
    rejoining (a 300 s teardown timeout seen at the end of `make test`). Without a group there is
    no heartbeat to miss and nothing to commit."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.by_session: dict[str, list[Json]] = defaultdict(list)
        self.changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None
        self.consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self.consumer = AIOKafkaConsumer(
            topics_for(self.settings).session_items,
            bootstrap_servers=self.settings.kafka_bootstrap_servers,
            group_id=None,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=64 * 1024 * 1024,
        )
        await self.consumer.start()
        self.task = asyncio.create_task(self._run())

    async def __aenter__(self) -> ItemCollector:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        assert self.consumer is not None
        async for r in self.consumer:
            try:
                item = decode(r.value)
                item["session_id"]
            except (ValueError, TypeError, KeyError):
                continue  # a poison record (tests put some there): not an Item
            async with self.changed:
                self.by_session[item["session_id"]].append(item)
                self.changed.notify_all()

    async def wait_for(self, session_id: str, pred: Any, timeout: float = 20) -> Json:
        async def check() -> Json:
            async with self.changed:
                while True:
                    for it in self.by_session.get(session_id, []):
                        if pred(it):
                            return it
                    await self.changed.wait()

        return await asyncio.wait_for(check(), timeout)

    async def stop(self) -> None:
        if self.task:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.task
        if self.consumer:
            await stop_consumer(self.consumer)


class TestRuntime:
    """A Runtime under the test's control: it registers, heartbeats, collects its deliveries and
    publishes whatever native observations the test tells it to."""

    __test__ = False

    def __init__(self, settings: Settings, harness: str, *, placements: tuple[str, ...] = (
            "none", "openai_hosted", "self_hosted"), bridge_protocol: int | None = 3,
            message_images: bool = True, function_result_images: bool = True,
            runtime_id: str | None = None, sealed: KeyPair | None = None) -> None:
        self.settings = settings
        self.sealed = sealed  # asks for sealed deliveries, opened with this key pair
        self.topics = topics_for(settings)
        self.runtime_id = runtime_id or f"rt_{uuid.uuid4().hex}"
        self.harness = harness
        self.placements = placements
        self.bridge_protocol = bridge_protocol
        self.message_images = message_images
        self.function_result_images = function_result_images
        self.deliveries: asyncio.Queue[Json] = asyncio.Queue()
        self.raw: list[bytes] = []  # this Runtime's delivery records as they were on the topic
        self.producer: AIOKafkaProducer | None = None
        self.consumer: AIOKafkaConsumer | None = None
        self.tasks: list[asyncio.Task[None]] = []

    def registration(self, status: str = "ready") -> Json:
        caps: Json = {"message_images": self.message_images,
                      "function_result_images": self.function_result_images}
        if self.sealed is not None:
            caps["sealed_deliveries"] = {"alg": sealing.ALG, "key": self.sealed.public}
        return {
            "schema": "runtime.registration/1", "runtime_id": self.runtime_id,
            "harness": self.harness, "bridge_protocol": self.bridge_protocol,
            "placements": list(self.placements),
            "capabilities": caps,
            "status": status,
            "heartbeat_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        }

    async def start(self, heartbeat: bool = True) -> TestRuntime:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.settings.kafka_bootstrap_servers,
                                         acks="all", max_request_size=64 * 1024 * 1024)
        await self.producer.start()
        self.consumer = AIOKafkaConsumer(
            self.topics.runtime_deliveries,
            bootstrap_servers=self.settings.kafka_bootstrap_servers,
            group_id=f"test-runtime-{self.runtime_id}", auto_offset_reset="earliest",
            max_partition_fetch_bytes=64 * 1024 * 1024)
        await self.consumer.start()
        self.tasks.append(asyncio.create_task(self._consume()))
        await self.register()
        if heartbeat:
            self.tasks.append(asyncio.create_task(self._heartbeat()))
        return self

    async def register(self, status: str = "ready") -> None:
        assert self.producer is not None
        await self.producer.send_and_wait(self.topics.runtime_registrations,
                                          encode(self.registration(status)),
                                          key=self.runtime_id.encode())

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            await self.register()

    async def _consume(self) -> None:
        assert self.consumer is not None
        async for r in self.consumer:
            d = decode(r.value)
            if d.get("runtime_id") == self.runtime_id:
                self.raw.append(r.value)
                if self.sealed is not None and sealing.is_sealed(d):
                    d = sealing.unseal(d, self.sealed)
                d["_timestamp"] = r.timestamp / 1000.0
                await self.deliveries.put(d)

    async def next_delivery(self, timeout: float = 20) -> Json:
        return await asyncio.wait_for(self.deliveries.get(), timeout)

    def observation(self, session_id: str, native: Json | None, **extra: Any) -> Json:
        return {"schema": "runtime.observation/1", "runtime_id": self.runtime_id,
                "session_id": session_id, "harness": self.harness,
                "observed_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                "observation_id": uuid.uuid4().hex, "native": native, **extra}

    async def observe(self, session_id: str, native: Json | None, **extra: Any) -> None:
        assert self.producer is not None
        rec = self.observation(session_id, native, **extra)
        await self.producer.send_and_wait(self.topics.runtime_observations, encode(rec),
                                          key=session_id.encode())

    async def stop(self, gone: bool = True) -> None:
        for t in self.tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if gone and self.producer is not None:
            with contextlib.suppress(Exception):
                await self.register("gone")
        if self.consumer:
            await stop_consumer(self.consumer)
        if self.producer:
            await self.producer.stop()


class System:
    """The four services in-process, sharing the test's settings (unique topics and DB)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = topics_for(settings)
        self.storage = StorageService(settings)
        self.admission = AdmissionService(settings)
        self.dispatcher = DispatcherService(settings)
        self.receipts = ReceiptService(settings)
        self.items = ItemCollector(settings)
        self.http: httpx.AsyncClient | None = None
        self.runtimes: list[TestRuntime] = []

    async def start(self, services: tuple[str, ...] = (
            "storage", "admission", "dispatcher", "receipts")) -> System:
        await ensure_topics(self.settings, self.topics)
        self.started = services
        self.stopped: set[str] = set()  # stopped by the test (``stop_service``)
        await asyncio.gather(*(getattr(self, s).start() for s in services))
        await self.items.start()
        transport = httpx.ASGITransport(app=self.admission.http)
        self.http = httpx.AsyncClient(transport=transport, base_url="http://core",
                                      timeout=30)
        return self

    async def runtime(self, harness: str, **kw: Any) -> TestRuntime:
        rt = await TestRuntime(self.settings, harness, **kw).start()
        self.runtimes.append(rt)
        return rt

    async def create(self, harness: str, input: Any, placement: str = "none", **extra: Any
                     ) -> httpx.Response:
        assert self.http is not None
        return await self.http.post("/v1/sessions", json={
            "harness": harness, "placement": placement, "input": input, **extra})

    async def event(self, session_id: str, body: Json, **params: Any) -> httpx.Response:
        assert self.http is not None
        return await self.http.post(f"/v1/sessions/{session_id}/events", json=body,
                                    params=params)

    async def stop_service(self, name: str) -> None:
        """Stop one of the services now (``stop`` leaves it alone afterwards)."""
        self.stopped.add(name)
        await getattr(self, name).stop()

    async def stop(self) -> None:
        """Stop everything this System started. Every part is stopped even when one fails, and
        then the failures are raised: a service whose stop raises is a defect the test shows,
        not noise it swallows."""
        errors: list[Exception] = []

        async def attempt(stop: Awaitable[None]) -> None:
            try:
                await stop
            except Exception as exc:
                errors.append(exc)

        for rt in self.runtimes:
            await attempt(rt.stop())
        if self.http:
            await attempt(self.http.aclose())
        await attempt(self.items.stop())
        for s in reversed(self.started):
            if s not in self.stopped:
                await attempt(getattr(self, s).stop())
        if errors:
            raise ExceptionGroup("System.stop: a part did not stop cleanly", errors)


# what the ``make_system`` fixture (tests/conftest.py) gives: services=…, **settings overrides
SystemFactory = Callable[..., Awaitable[System]]


class Inbox:
    """A Runtime's deliveries sorted by Session, so several Sessions can share one Runtime."""

    def __init__(self, rt: TestRuntime) -> None:
        self.rt = rt
        self.queues: dict[str, asyncio.Queue[Json]] = defaultdict(asyncio.Queue)
        self.task = asyncio.create_task(self._route())

    async def _route(self) -> None:
        while True:
            d = await self.rt.deliveries.get()
            self.queues[d["session_id"]].put_nowait(d)

    async def next(self, sid: str, timeout: float = 20) -> Json:
        return await asyncio.wait_for(self.queues[sid].get(), timeout)

    async def assert_quiet(self, sid: str, seconds: float = QUIET_S) -> None:
        await asyncio.sleep(seconds)
        assert self.queues[sid].empty(), f"unexpected delivery: {self.queues[sid].get_nowait()}"

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def items(system: System, sid: str) -> list[Json]:
    assert system.http is not None
    r = await system.http.get(f"/v1/sessions/{sid}/items", params={"limit": 1000})
    assert r.status_code == 200, r.text
    out: list[Json] = r.json()["items"]
    return out


async def create(system: System, harness: str, input: Any) -> str:
    r = await system.create(harness, input)
    assert r.status_code == 201, r.text
    sid: str = r.json()["id"]
    return sid


def ts(item: Json) -> float:
    return datetime.fromisoformat(item["created_at"].replace("Z", "+00:00")).timestamp()


class Beat:
    """A Runtime's heartbeat, once a second, carrying a status the test sets (TestRuntime's own
    heartbeat always says ``ready``). Like the reference Runtime's, it outlives a broker outage:
    a heartbeat that cannot be sent within a second is given up, the next one is tried a second
    later."""

    def __init__(self, rt: TestRuntime, status: str = "ready") -> None:
        self.rt = rt
        self.status = status
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(KafkaError, TimeoutError):
                await asyncio.wait_for(self.rt.register(self.status), 1.0)
            await asyncio.sleep(1.0)

    async def set(self, status: str) -> None:
        self.status = status
        await self.rt.register(status)

    async def close(self) -> None:
        await cancel(self.task)


async def until(probe: Callable[[], Awaitable[Any]], pred: Callable[[Any], bool],
                timeout: float = 15) -> Any:
    """``probe()`` again and again until ``pred`` holds of what it returns (that is returned)."""
    deadline = time.monotonic() + timeout
    while True:
        got = await probe()
        if pred(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s; last: {got}")
        await asyncio.sleep(0.2)

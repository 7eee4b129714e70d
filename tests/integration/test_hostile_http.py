"""Hostile HTTP input, against a running admission service on the real stack.

* schemathesis, from the OpenAPI document the service SERVES (``/openapi.json``), positive and
  negative cases for every operation;
* hypothesis fuzzing of create and event bodies (messages, parts, image URLs, tool results,
  metadata) and of raw bytes;
* explicit cases: a decompression-bomb PNG, a 50 MB body (with and without Content-Length),
  10 000-deep nesting, huge strings, invalid UTF-8, duplicate keys, NaN/Infinity, remote image
  URLs of every scheme.

For every case: no 5xx, and for every 4xx no write (the store's collections and the
``session.admitted`` / ``session.items`` / ``session.stored`` / reply topics unchanged). Only
admission and storage run, so when an answer is back every write it caused is done. Core must
never fetch anything: the remote URLs point at a local listener that must see 0 connections,
and every ``connect`` and name lookup of this process is audited (only Kafka, the store and the
service itself may be reached). Deterministic (hypothesis derandomized, no example database).
The counts are printed (``[hostile] …``) for the reliability table.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import socket
import struct
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from shared.domain.tenancy import key_entry
from shared.kafka import encode
from tests.support.binding import bind
from tests.support.builders import png_data_uri
from tests.support.system import System, SystemFactory

pytestmark = [
    pytest.mark.integration, pytest.mark.hostile,
    # the services on the event loop (aiokafka, pymongo) use `random` while hypothesis draws in
    # the worker thread; hypothesis's own generation stays derandomized
    pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies"),
]

Json = dict[str, Any]
KEY = "fuzz-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
OPEN_CALL = "call_hostile_open"  # opened by the Session's "Runtime" before the cases run
FUZZ = settings(max_examples=150, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck))


# ---- what may be reached: the audit ---------------------------------------------------------

@dataclass
class Audit:
    allowed_ports: set[int]
    connects: list[Any] = field(default_factory=list)  # every connect target
    lookups: list[str] = field(default_factory=list)  # every name resolved
    lock: threading.Lock = field(default_factory=threading.Lock)

    def outbound(self) -> list[Any]:
        bad = []
        for addr in self.connects:
            if isinstance(addr, tuple) and len(addr) >= 2:
                host, port = addr[0], addr[1]
                if host in ("127.0.0.1", "::1", "localhost") and port in self.allowed_ports:
                    continue
            bad.append(addr)
        return bad

    def foreign_lookups(self) -> list[str]:
        return [h for h in self.lookups if h not in ("127.0.0.1", "localhost", "::1", "")]


@contextlib.contextmanager
def audited(audit: Audit) -> Iterator[None]:
    """Record every ``socket.connect``/``connect_ex`` and ``getaddrinfo`` in this process."""
    orig_connect, orig_connect_ex = socket.socket.connect, socket.socket.connect_ex
    orig_gai = socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        with audit.lock:
            audit.connects.append(address)
        return orig_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        with audit.lock:
            audit.connects.append(address)
        return orig_connect_ex(self, address)

    def getaddrinfo(host: Any, *args: Any, **kw: Any) -> Any:
        with audit.lock:
            audit.lookups.append(host.decode() if isinstance(host, bytes) else str(host))
        return orig_gai(host, *args, **kw)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        socket.socket.connect = orig_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = orig_connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = orig_gai


class Listener:
    """A TCP listener the remote URLs point at; Core must never connect to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


# ---- what was written: the snapshot ---------------------------------------------------------

class Writes:
    """Per collection, its document count and a digest of every document's stored bytes (in
    ``_id`` order), and the end offsets of the topics admission and storage write; equal
    snapshots before and after a 4xx answer mean it wrote nothing — no insert, no delete, and
    no update in place (a changed field changes the digest; FerretDB v1 has no change streams
    to watch instead)."""

    def __init__(self, system: System) -> None:
        self.system = system
        t = system.topics
        self.topics = [t.session_admitted, t.session_items, t.session_stored,
                       t.storage_replies, t.core_facts]
        self.consumer: AIOKafkaConsumer | None = None
        self.tps: list[TopicPartition] = []

    async def start(self) -> None:
        s = self.system.settings
        self.consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap_servers,
                                         group_id=None)
        await self.consumer.start()
        for topic in self.topics:
            parts = self.consumer.partitions_for_topic(topic)
            while not parts:
                await self.consumer._client.force_metadata_update()
                parts = self.consumer.partitions_for_topic(topic)
            self.tps += [TopicPartition(topic, p) for p in parts]

    async def snapshot(self) -> tuple[Any, ...]:
        assert self.consumer is not None
        db = self.system.admission.db
        names = sorted(await db.list_collection_names())
        counts = tuple([(n, *await _digest(db.get_collection(n, codec_options=RAW)))
                        for n in names])
        ends = await self.consumer.end_offsets(self.tps)
        return counts, tuple(sorted((f"{tp.topic}/{tp.partition}", o) for tp, o in ends.items()))

    async def stop(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()


RAW: CodecOptions[RawBSONDocument] = CodecOptions(document_class=RawBSONDocument)


async def _digest(coll: Any) -> tuple[int, str]:
    h, n = hashlib.sha256(), 0
    async for doc in coll.find({}, sort=[("_id", 1)]):
        h.update(doc.raw)
        n += 1
    return n, h.hexdigest()


@dataclass
class Tally:
    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    writes_on_4xx: list[str] = field(default_factory=list)
    not_sent: int = 0  # cases the HTTP client itself refused to send (e.g. bad header bytes)
    nonconforming: list[str] = field(default_factory=list)  # answers unlike the OpenAPI document
    validated: int = 0  # answers checked against the document


class Harness:
    """Sends one request from a worker thread and checks it against the rules."""

    def __init__(self, system: System, loop: asyncio.AbstractEventLoop, writes: Writes) -> None:
        self.base = f"http://127.0.0.1:{system.settings.http_port}"
        self.loop = loop
        self.writes = writes
        self.client = httpx.Client(base_url=self.base, timeout=60)
        self.tally: dict[str, Tally] = {}
        self.snap_s = 0.0
        self.http_s = 0.0
        self.listener_port = 0

    def _snap(self) -> tuple[Any, ...]:
        t0 = time.monotonic()
        try:
            return asyncio.run_coroutine_threadsafe(self.writes.snapshot(), self.loop).result(60)
        finally:
            self.snap_s += time.monotonic() - t0

    def send(self, group: str, method: str, path: str, *, content: bytes | None = None,
             headers: dict[str, str] | None = None, params: Any = None,
             describe: str = "",
             validate: Callable[[httpx.Response], None] | None = None) -> int | None:
        """``validate``: checks a (non-streamed) answer against the served OpenAPI document;
        it raises when the answer does not conform."""
        t = self.tally.setdefault(group, Tally())
        before = self._snap()
        hdrs = {"content-type": "application/json", **AUTH, **(headers or {})}
        if content is not None and PORT_TOKEN.encode() in content:
            content = content.replace(PORT_TOKEN.encode(), str(self.listener_port).encode())
        t0 = time.monotonic()
        try:
            with self.client.stream(method, path, content=content, headers=hdrs,
                                    params=params) as r:
                status = r.status_code
                streamed = "text/event-stream" in r.headers.get("content-type", "")
                if not streamed:
                    r.read()
                    if validate is not None:
                        t.validated += 1
                        try:
                            validate(r)
                        # schemathesis raises its failures as a BaseExceptionGroup
                        except (Exception, BaseExceptionGroup) as exc:
                            t.nonconforming.append(
                                f"{method} {path} → {status}: {str(exc)[:600]}")
        except (httpx.InvalidURL, httpx.LocalProtocolError, UnicodeEncodeError, ValueError):
            t.not_sent += 1
            return None
        finally:
            self.http_s += time.monotonic() - t0
        t.cases += 1
        t.statuses[status] += 1
        what = f"{method} {path} {describe or (content or b'')[:200]!r} → {status}"
        if status >= 500:
            t.server_errors.append(what)
        if 400 <= status < 500 and self._snap() != before:
            t.writes_on_4xx.append(what)
        return status

    def close(self) -> None:
        self.client.close()


# ---- inputs ---------------------------------------------------------------------------------

def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def bomb_png(w: int = 60_000, h: int = 60_000) -> bytes:
    """A small, valid-looking PNG claiming huge dimensions, with real compressed rows."""
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)  # 8-bit grayscale
    rows = zlib.compress(b"\x00" * (w + 1) * 64, 9)  # 64 rows of zeros: tiny once compressed
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", rows)
            + _chunk(b"IEND", b""))


PORT_TOKEN = "__LPORT__"  # in generated bodies; replaced by the listener's port when sent


def remote_urls(port: int | str) -> list[str]:
    """Remote image URLs of every scheme, at the listener. Hypothesis strategies are built with
    ``PORT_TOKEN`` (so the same cases are drawn whatever port the listener got; ``send``
    puts the port in), the explicit cases with the port itself."""
    hp = f"127.0.0.1:{port}"
    return [
        f"http://{hp}/cat.png", f"https://{hp}/cat.png", f"HTTP://{hp}/cat.png",
        f"ftp://{hp}/cat.png", f"ftps://{hp}/cat.png", f"sftp://{hp}/cat.png",
        f"gopher://{hp}/_GET%20/", f"ws://{hp}/s", f"wss://{hp}/s", f"dict://{hp}/d",
        f"ldap://{hp}/o", f"tftp://{hp}/f", f"telnet://{hp}/", f"smb://{hp}/share",
        f"jar:http://{hp}/a.jar!/cat.png", f"netdoc://{hp}/x", f"//{hp}/cat.png",
        f"http://localhost:{port}/cat.png", f"http://[::1]:{port}/cat.png",
        f"http://user:pw@{hp}/cat.png", f" http://{hp}/cat.png", f"http://{hp}/cat.png#.png",
        "file:///etc/passwd", "file://localhost/etc/hostname", "s3://bucket/cat.png",
        "gs://bucket/cat.png", "http://example.com/cat.png", "https://169.254.169.254/latest/",
        f"data:text/uri-list,http://{hp}/cat.png",
        f"data:image/png;base64,{base64.b64encode(f'http://{hp}/cat.png'.encode()).decode()}",
        "data:image/svg+xml;base64," + base64.b64encode(
            f'<svg xmlns="http://www.w3.org/2000/svg"><image href="http://{hp}/x.png"/></svg>'
            .encode()).decode(),
        f"data:image/png;url=http://{hp}/cat.png", f"data:,http://{hp}/cat.png",
        f"blob:http://{hp}/0", f"chrome://{hp}/", f"php://filter/resource=http://{hp}/",
        f"mailto:a@{hp}", f"\\\\{hp}\\share\\cat.png",
    ]


def _msg(*parts: Json) -> Json:
    return {"role": "user", "content": list(parts)}


def _img(url: str) -> Json:
    return {"type": "input_image", "image_url": url}


def _j(v: Any) -> bytes:
    return json.dumps(v).encode()


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                      st.text(max_size=40))
json_value = st.recursive(json_leaf, lambda c: st.one_of(
    st.lists(c, max_size=4), st.dictionaries(st.text(max_size=8), c, max_size=4)),
    max_leaves=20)


def parts(urls: list[str]) -> st.SearchStrategy[Any]:
    text_part = st.fixed_dictionaries({"type": st.just("input_text"),
                                       "text": st.text(max_size=50)})
    image_part = st.fixed_dictionaries({"type": st.just("input_image"), "image_url": st.one_of(
        st.sampled_from(urls), st.just(png_data_uri()),
        st.binary(max_size=64).map(lambda b: "data:image/png;base64," + base64.b64encode(b)
                                   .decode()),
        st.just("data:image/png;base64," + base64.b64encode(bomb_png()).decode()),
        st.text(max_size=30))})
    odd = st.dictionaries(st.sampled_from(["type", "text", "image_url", "file_id", "detail"]),
                          json_value, max_size=3)
    return st.one_of(text_part, image_part, odd, json_leaf)


def messages(urls: list[str]) -> st.SearchStrategy[Any]:
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "", "USER"]),
         "content": st.one_of(st.lists(parts(urls), max_size=4), st.text(max_size=20))},
        optional={"type": st.sampled_from(["message", "other"])})
    return st.one_of(st.text(max_size=40), st.lists(message, max_size=3), json_leaf)


def valid_ish_messages(urls: list[str]) -> st.SearchStrategy[Any]:
    """Close to valid: user messages of text and image parts, the images being a small PNG,
    remote URLs, the bomb or random base64 — so the cases reach the deeper rules."""
    text_part = st.builds(lambda t: {"type": "input_text", "text": t}, st.text(max_size=30))
    image_part = st.builds(_img, st.one_of(
        st.just(png_data_uri()), st.sampled_from(urls),
        st.just("data:image/png;base64," + base64.b64encode(bomb_png()).decode()),
        st.binary(min_size=1, max_size=48).map(
            lambda b: "data:image/jpeg;base64," + base64.b64encode(b).decode())))
    message = st.builds(lambda ps: _msg(*ps), st.lists(st.one_of(text_part, image_part),
                                                       min_size=1, max_size=3))
    return st.one_of(st.text(min_size=1, max_size=30), st.lists(message, min_size=1,
                                                                max_size=2))


def create_bodies(urls: list[str]) -> st.SearchStrategy[Json]:
    names = ["codex", "claude_code", "minimax_code", "", "Codex", "gpt"]
    wild = st.fixed_dictionaries(
        {"harness": st.one_of(st.sampled_from(names), json_leaf),
         "placement": st.one_of(st.sampled_from(["none", "openai_hosted", "self_hosted", "x"]),
                                json_leaf),
         "input": messages(urls)},
        optional={"metadata": json_value, "tags": json_value, "stream": st.booleans(),
                  "client_request_id": st.one_of(st.uuids().map(str), json_leaf),
                  "external_actor": json_value, "unknown": json_value})
    valid_ish = st.fixed_dictionaries(
        {"harness": st.sampled_from(names[:3]),
         "placement": st.sampled_from(["none", "openai_hosted", "self_hosted"]),
         "input": valid_ish_messages(urls)},
        optional={"metadata": st.dictionaries(st.text(max_size=8), json_value, max_size=3),
                  "tags": st.lists(st.text(max_size=8), max_size=3),
                  "client_request_id": st.uuids().map(str)})
    return st.one_of(valid_ish, wild)


def event_bodies(urls: list[str]) -> st.SearchStrategy[Json]:
    message = st.fixed_dictionaries(
        {"type": st.just("agent.session.input.message"),
         "input": st.one_of(messages(urls), valid_ish_messages(urls).filter(
             lambda m: isinstance(m, list)))},
        optional={"client_event_id": st.one_of(st.uuids().map(str), st.uuids().map(str),
                                               json_leaf),
                  "metadata": st.one_of(st.dictionaries(st.text(max_size=8), json_value,
                                                        max_size=3), json_value)})
    result = st.fixed_dictionaries(
        {"type": st.just("agent.session.input.tool_result"),
         "call_id": st.one_of(st.just(OPEN_CALL), st.text(max_size=12), json_leaf),
         "success": st.one_of(st.booleans(), json_leaf)},
        optional={"output": st.one_of(st.text(max_size=20), st.lists(parts(urls), max_size=3),
                                      json_leaf),
                  "error": st.one_of(st.text(max_size=20), json_leaf)})
    near_valid = st.fixed_dictionaries(
        {"type": st.just("agent.session.input.message"),
         "input": valid_ish_messages(urls).filter(lambda m: isinstance(m, list))},
        optional={"client_event_id": st.uuids().map(str),
                  "metadata": st.dictionaries(st.text(max_size=8), json_value, max_size=3)})
    other = st.dictionaries(st.text(max_size=8), json_value, max_size=4)
    return st.one_of(near_valid, message, result, other)


# ---- the fixture ----------------------------------------------------------------------------

@pytest.fixture
async def core(make_system: SystemFactory) -> System:
    """admission (serving HTTP on its own port, auth on) and storage only."""
    return await make_system(services=("storage", "admission"), auth_disabled=False,
                             api_keys=key_entry("hostile", KEY))


def _report(name: str, tally: dict[str, Tally]) -> None:
    for group, t in tally.items():
        print(f"[hostile] {name}/{group}: cases={t.cases} not_sent={t.not_sent} "
              f"5xx={len(t.server_errors)} writes_on_4xx={len(t.writes_on_4xx)} "
              f"validated={t.validated} nonconforming={len(t.nonconforming)} "
              f"statuses={dict(sorted(t.statuses.items()))}")


async def _open_call(core: System, sid: str) -> None:
    """The Session's Runtime opens ``OPEN_CALL`` (a Codex ``item/started`` observation, which
    storage turns into the call), so the tool-result cases reach the content rules instead of
    the 404 for an unknown call."""
    await bind(core.settings, sid, "rt_" + "0" * 32)  # playing the dispatcher: its Runtime
    producer = AIOKafkaProducer(bootstrap_servers=core.settings.kafka_bootstrap_servers,
                                acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(core.topics.runtime_observations, encode({
            "schema": "runtime.observation/1", "runtime_id": "rt_" + "0" * 32,
            "session_id": sid, "harness": "codex", "observed_at": "2026-01-01T00:00:00Z",
            "observation_id": f"obs_{sid}", "native": {"method": "item/started", "params": {
                "threadId": "thr_hostile", "turnId": "turn_hostile",
                "item": {"type": "dynamicToolCall", "id": OPEN_CALL, "tool": "look",
                         "arguments": {}}}}}), key=sid.encode())
    finally:
        await producer.stop()
    assert core.http is not None
    deadline = time.monotonic() + 60
    while True:
        r = await core.http.get(f"/v1/sessions/{sid}/tool_results/{OPEN_CALL}", headers=AUTH)
        if r.status_code == 200:
            assert r.json()["submitted"] is False, r.text
            return
        assert time.monotonic() < deadline, f"the call was not opened: {r.status_code} {r.text}"
        await asyncio.sleep(0.2)


async def _run(core: System, work: Callable[[Harness, str, int], None], name: str
               ) -> dict[str, Tally]:
    """Run ``work`` in a thread (blocking HTTP client) while the services run on this loop,
    with every connect and lookup audited and a listener the remote URLs point at."""
    writes = Writes(core)
    await writes.start()
    listener = Listener()
    s = core.settings
    allowed = {int(s.kafka_bootstrap_servers.rsplit(":", 1)[1]), s.http_port,
               int(s.mongodb_uri.rsplit(":", 1)[1].split("/")[0])}
    audit = Audit(allowed_ports=allowed)
    harness = Harness(core, asyncio.get_running_loop(), writes)
    harness.listener_port = listener.port
    before = await writes.snapshot()
    created = await core.http.post("/v1/sessions", headers=AUTH, json={  # type: ignore[union-attr]
        "harness": "codex", "placement": "none", "input": "a real Session to fuzz events at"})
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    await _open_call(core, sid)
    after_create = await writes.snapshot()
    assert after_create != before  # the snapshot does see a write
    # ... and an update in place that leaves every count and offset as it was
    sessions = core.admission.db["sessions"]
    one = await sessions.find_one({})
    assert one is not None
    await sessions.update_one({"_id": one["_id"]}, {"$set": {"hostile_probe": 1}})
    assert await writes.snapshot() != after_create
    await sessions.update_one({"_id": one["_id"]}, {"$unset": {"hostile_probe": ""}})
    started = time.monotonic()
    try:
        with audited(audit):
            await asyncio.to_thread(work, harness, sid, listener.port)
            await asyncio.sleep(1.0)  # anything a case set off has had time to connect
    finally:
        harness.close()
        listener.close()
        await writes.stop()
    _report(name, harness.tally)
    print(f"[hostile] {name}: {time.monotonic() - started:.1f}s (http {harness.http_s:.1f}s, "
          f"write snapshots {harness.snap_s:.1f}s), listener connections="
          f"{listener.accepted}, outbound connects={len(audit.outbound())}, "
          f"foreign lookups={len(audit.foreign_lookups())}")
    for t in harness.tally.values():
        assert t.server_errors == [], t.server_errors[:5]
        assert t.writes_on_4xx == [], t.writes_on_4xx[:5]
        assert t.nonconforming == [], t.nonconforming[:5]
    assert listener.accepted == 0
    assert audit.outbound() == [], audit.outbound()[:10]
    assert audit.foreign_lookups() == [], audit.foreign_lookups()[:10]
    assert sum(t.cases for t in harness.tally.values()) > 0
    return harness.tally


# ---- the tests ------------------------------------------------------------------------------

async def test_the_audit_and_the_listener_do_see_a_connection() -> None:
    """The detectors themselves: a blocking and an asyncio connection to the listener, and a
    name lookup, are all seen (so the zeros in the runs below mean something)."""
    listener = Listener()
    audit = Audit(allowed_ports=set())
    try:
        with audited(audit):
            socket.create_connection(("127.0.0.1", listener.port), timeout=5).close()
            _, writer = await asyncio.open_connection("127.0.0.1", listener.port)
            writer.close()
            with contextlib.suppress(OSError):
                socket.getaddrinfo("fetch-me.invalid", 80)
        for _ in range(50):
            if listener.accepted >= 2:
                break
            await asyncio.sleep(0.1)
    finally:
        listener.close()
    assert listener.accepted == 2
    assert [a[1] for a in audit.outbound()] == [listener.port, listener.port]
    assert "fetch-me.invalid" in audit.foreign_lookups()


async def test_explicit_hostile_cases(core: System) -> None:
    def work(h: Harness, sid: str, port: int) -> None:
        ev = f"/v1/sessions/{sid}/events"
        create = "/v1/sessions"

        def body(inp: Any, **extra: Any) -> bytes:
            return _j({"harness": "claude_code", "placement": "none", "input": inp, **extra})

        bomb = "data:image/png;base64," + base64.b64encode(bomb_png()).decode()
        assert len(bomb) < 8000  # a few KB claiming 60 000 × 60 000 pixels
        expect: list[tuple[str, int | None]] = []

        def go(group: str, path: str, content: bytes, want: int | None, **kw: Any) -> None:
            expect.append((group, h.send(group, "POST", path, content=content, **kw)))
            assert want is None or expect[-1][1] == want, (group, expect[-1], want)

        go("bomb_png", create, body([_msg(_img(bomb))]), 413)
        go("bomb_png", ev, _j({"type": "agent.session.input.message",
                               "input": [_msg(_img(bomb))]}), 413)
        big = b'{"harness":"codex","placement":"none","input":"' + b"x" * (50 << 20) + b'"}'
        go("50mb_body", create, big, 413)

        def chunks(data: bytes = big) -> Iterator[bytes]:
            for i in range(0, len(data), 1 << 20):
                yield data[i:i + (1 << 20)]

        # no Content-Length: the streamed limit answers
        t = h.tally.setdefault("50mb_chunked", Tally())
        before = h._snap()
        r = h.client.post(create, content=chunks(), headers={**AUTH,
                          "content-type": "application/json"})
        t.cases += 1
        t.statuses[r.status_code] += 1
        assert r.status_code == 413 and h._snap() == before
        go("deep_nesting", create, b"[" * 10_000 + b"]" * 10_000, 400)
        go("deep_nesting", create, b'{"harness":"codex","placement":"none","input":"x",'
           b'"metadata":' + b'{"a":' * 10_000 + b"1" + b"}" * 10_000 + b"}", 400)
        go("deep_nesting", ev, b'{"type":"agent.session.input.message","input":'
           + b"[" * 10_000 + b"]" * 10_000 + b"}", 400)
        go("deep_nesting", create, body("x", metadata=json.loads(
            '{"a":' * 200 + "1" + "}" * 200)), 400)  # parses; deeper than the store takes
        for raw in (b'{"harness":"codex","placement":"none","input":"\xff\xfe"}',
                    b'{"harness":"codex","placement":"none","input":"\xc0\xaf"}',
                    b'{"harness":"codex","placement":"none","input":"\xed\xa0\x80"}',
                    b'{"harness":"codex","placement":"none","input":"\\ud800"}',
                    b"\x00\x01\x02"):
            go("invalid_utf8", create, raw, 400)
        go("duplicate_keys", create,
           b'{"harness":"codex","harness":"claude_code","placement":"none","input":"x"}', 400)
        go("duplicate_keys", ev, b'{"type":"agent.session.input.message","input":[{"role":'
           b'"user","content":[{"type":"input_text","text":"a","text":"b"}]}]}', 400)
        for const in (b"NaN", b"Infinity", b"-Infinity", b"1e999"):
            go("nan_infinity", create, b'{"harness":"codex","placement":"none","input":"x",'
               b'"metadata":{"n":' + const + b"}}", 400)
        for url in remote_urls(port):
            go("remote_urls", create, body([_msg(_img(url))]), 400)
            go("remote_urls", ev, _j({"type": "agent.session.input.message",
                                      "input": [_msg(_img(url))]}), 400)
            go("remote_urls", ev, _j({"type": "agent.session.input.tool_result",
                                      "call_id": OPEN_CALL, "success": True,
                                      "output": [_img(url)]}), 400)
            # metadata is stored, never interpreted: a URL there is just a string
            go("remote_urls", create, body("x", metadata={"image_url": url}), 201)
        # a tiny valid image is still admitted (the remote ones are refused, not all images)
        go("remote_urls", create, body([_msg(_img(png_data_uri()))]), 201)
        # last: the store's counts get slower with every large document (FerretDB scans)
        go("huge_strings", create, body("y" * (8 << 20)), None)  # within the body limit
        go("huge_strings", create, body("x", metadata={"k" * (4 << 20): "v"}), None)
        go("huge_strings", ev, _j({"type": "agent.session.input.tool_result",
                                   "call_id": "c" * (2 << 20), "success": True}), None)
        go("huge_strings", create, _j({"harness": "h" * (1 << 20), "placement": "none",
                                       "input": "x"}), 400)

    await _run(core, work, "explicit")


def run_cases(h: Harness, strategy: st.SearchStrategy[Any], group: str, n: int) -> None:
    """Send every schemathesis case the strategy draws (our client: SSE answers are not read to
    their end, and the audit sees every connection), and check every answer against the
    document: its status is declared, its content type too, its body matches the declared
    schema. A fixed seed: hypothesis's derandomized seed would hash the strategy's repr, which
    holds this run's Session id."""
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [status_code_conformance, content_type_conformance, response_schema_conformance]

    @seed(n)
    @FUZZ
    @given(case=strategy)
    def one(case: Any) -> None:
        body = getattr(case, "body", None)
        content = None if body is None or type(body).__name__ == "NotSet" else (
            body if isinstance(body, bytes) else _j(body))
        headers = {k: str(v) for k, v in (case.headers or {}).items()
                   if k.lower() not in ("authorization", "content-length")}
        h.send(group, case.method, case.formatted_path, content=content, headers=headers,
               params=dict(case.query or {}), describe=f"{(content or b'')[:200]!r}",
               validate=lambda r: case.validate_response(r, checks=checks))

    one()


async def test_schemathesis_against_the_served_openapi(core: System) -> None:
    import schemathesis
    from schemathesis import GenerationMode

    def work(h: Harness, sid: str, port: int) -> None:
        schema = schemathesis.openapi.from_url(f"{h.base}/openapi.json", headers=AUTH)
        ops = [r.ok() for r in schema.get_all_operations()]
        assert {f"{o.method.upper()} {o.path}" for o in ops} >= {
            "POST /v1/sessions", "POST /v1/sessions/{session_id}/events",
            "GET /v1/sessions/{session_id}", "GET /v1/sessions/{session_id}/items",
            "GET /v1/sessions/{session_id}/tool_results/{call_id}"}
        n = 0
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for fixed in ({"session_id": sid}, None):
                strategy = schema.as_strategy(generation_mode=mode, path_parameters=fixed,
                                              query={"timeout_ms": "500"})
                n += 1
                run_cases(h, strategy, f"{mode.value}{'/real_session' if fixed else ''}", n)

    tally = await _run(core, work, "schemathesis")
    assert sum(t.validated for t in tally.values()) > 0  # the answers were checked


async def test_hypothesis_bodies(core: System) -> None:
    def work(h: Harness, sid: str, port: int) -> None:
        urls = remote_urls(PORT_TOKEN)

        @seed(1)
        @FUZZ
        @given(b=create_bodies(urls))
        def creates(b: Json) -> None:
            h.send("create_bodies", "POST", "/v1/sessions", content=_j(b))

        @seed(2)
        @FUZZ
        @given(b=event_bodies(urls), wait=st.booleans())
        def events(b: Json, wait: bool) -> None:
            params = {"wait": "true", "timeout_ms": "300"} if wait else None
            h.send("event_bodies", "POST", f"/v1/sessions/{sid}/events", content=_j(b),
                   params=params)

        @seed(3)
        @FUZZ
        @given(raw=st.one_of(st.binary(max_size=200), json_value.map(_j)),
               path=st.sampled_from(["/v1/sessions", f"/v1/sessions/{sid}/events"]))
        def raw_bytes(raw: bytes, path: str) -> None:
            h.send("raw_bytes", "POST", path, content=raw)

        creates()
        events()
        raw_bytes()

    await _run(core, work, "hypothesis")

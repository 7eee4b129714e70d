"""``POST /v1/sessions`` with ``"stream": true``: Items published between
storage's reply and the stream's listener attaching to the Item tail must not be lost. The
stream catches up from the store after attaching (like the ``?wait`` path) and de-duplicates by
``sequence``. A fake Admission makes the race deterministic: its ``create_session`` publishes an
Item to the tail *before* anyone listens (so the tail drops it) and stores it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from services.admission.core import Answer
from services.admission.http import build_http_app
from services.admission.tails import ItemTail
from shared import records
from shared.settings import Settings

SID = "session_" + "b" * 32
Json = dict[str, Any]


def item(seq: int, kind: str = "message", **extra: Any) -> Json:
    return {"id": f"item_{seq}", "session_id": SID, "sequence": seq, "type": kind,
            "turn_id": "turn_1", **extra}


class FakeTail(ItemTail):
    """The Item tail's fan-out (the real one, fed by hand): a record published with no listener
    attached is gone; listeners get the HTTP Item, without the topic envelope."""

    def __init__(self) -> None:
        super().__init__(Settings(), "t.session.items", dlq=None)  # type: ignore[arg-type]
        self.attached = asyncio.Event()

    def listen(self, session_id: str) -> asyncio.Queue[Json]:
        q = super().listen(session_id)
        self.attached.set()
        return q

    def publish(self, it: Json) -> None:
        self.dispatch(records.item_record(it, "acme"))


class FakeAdmission:
    def __init__(self) -> None:
        self.items = FakeTail()
        self.store: list[Json] = []

    def write(self, it: Json) -> None:
        self.store.append(it)  # storage writes the store, then publishes
        self.items.publish(it)

    async def create_session(self, body: Json, *, tenant: str, checked: object = None) -> Answer:
        first = [item(1), item(2, "turn", state="started")]
        self.store += first
        # The race: after storage replied, before the stream attaches, the Runtime is quick.
        self.write(item(3, "function_call", call_id="call_1", name="f", arguments={}))
        return Answer(201, {"id": SID, "harness": "codex", "items": first}, session_id=SID)

    async def items_after(self, session_id: str, after: int) -> list[Json]:
        # An Item written while the stream reads back reaches it twice: from the tail (it is
        # attached by now) and from the store.
        self.write(item(4, "message"))
        return [it for it in self.store if it["sequence"] > after]


async def _ready() -> bool:
    return True


async def read_stream(app: Any, body: Json, want: int, during: Any) -> tuple[int, list[Json]]:
    """Drive the ASGI app directly (the response never ends): the status and the first
    ``want`` ``item`` events; ``during`` runs once the stream is attached."""
    raw = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/sessions", "raw_path":
             b"/v1/sessions", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"),
                         (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 1), "server": ("core", 80)}
    sent = False
    hang = asyncio.Event()
    status: list[int] = []
    buf = bytearray()
    got: list[Json] = []
    enough = asyncio.Event()

    async def receive() -> Json:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await hang.wait()
        return {"type": "http.disconnect"}

    async def send(message: Json) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body":
            buf.extend(message.get("body", b""))
            while b"\n\n" in buf:
                block, _, rest = bytes(buf).partition(b"\n\n")
                buf[:] = rest
                lines = dict(ln.split(": ", 1) for ln in block.decode().splitlines()
                             if ": " in ln)
                if lines.get("event") == "item":
                    got.append(json.loads(lines["data"]))
                    if len(got) >= want:
                        enough.set()

    task = asyncio.create_task(app(scope, receive, send))
    try:
        await during()
        await asyncio.wait_for(enough.wait(), 1.5)
    except TimeoutError:
        pass
    finally:
        hang.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return status[0], got


async def test_item_published_before_the_listener_attaches_is_streamed_once() -> None:
    fake = FakeAdmission()
    app = build_http_app(Settings(auth_disabled=True), lambda: fake,  # type: ignore[arg-type,return-value]
                         _ready)

    async def during() -> None:
        await asyncio.wait_for(fake.items.attached.wait(), 5)
        await asyncio.sleep(0.05)
        fake.write(item(5, "turn", state="completed"))

    status, got = await read_stream(app, {"harness": "codex", "placement": "none",
                                          "input": "hi", "stream": True}, 6, during)
    assert status == 201
    # Every Item once, in sequence order (asking for 6 waits out any duplicate).
    assert [(it["sequence"], it["type"]) for it in got] == [
        (1, "message"), (2, "turn"), (3, "function_call"), (4, "message"), (5, "turn")]
    assert all("schema" not in it and "tenant" not in it for it in got)

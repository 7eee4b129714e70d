"""shared/failures.py: which failures are transient, permanent or unknown, and what a consumer
does with each (retry and rewind, dead-letter at once, retry and then dead-letter)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, MessageSizeTooLargeError
from aiokafka.structs import ConsumerRecord
from bson.errors import InvalidDocument
from pydantic import BaseModel
from pymongo.errors import (
    AutoReconnect,
    BulkWriteError,
    DocumentTooLarge,
    OperationFailure,
    ServerSelectionTimeoutError,
)

from shared.domain.poison import TOO_LARGE, UNPROCESSABLE
from shared.failures import GaveUp, attempt, classify, settle
from shared.kafka import DeadLetters, decode
from shared.settings import Settings
from shared.topics import topics_for


class _M(BaseModel):
    x: int


def _validation_error() -> Exception:
    try:
        _M.model_validate({"x": "no"})
    except Exception as exc:
        return exc
    raise AssertionError


@pytest.mark.parametrize(("exc", "kind"), [
    (DocumentTooLarge("update command document too large"), "permanent"),
    (InvalidDocument("key must not contain '.'"), "permanent"),
    (MessageSizeTooLargeError(), "permanent"),
    (_validation_error(), "permanent"),
    (UnicodeEncodeError("utf-8", "\udfff", 0, 1, "surrogates not allowed"), "permanent"),
    (KeyError("session_id"), "permanent"),
    (AutoReconnect("connection reset"), "transient"),
    (ServerSelectionTimeoutError("no server"), "transient"),
    (KafkaConnectionError(), "transient"),
    (TimeoutError(), "transient"),
    (ConnectionResetError(), "transient"),
    (OperationFailure("database is locked"), "unknown"),
    (OperationFailure("object to insert too large", code=10334), "permanent"),
    (BulkWriteError({"writeErrors": [{"index": 0, "code": 10334, "errmsg": "too large"}]}),
     "permanent"),
    (RuntimeError("something else"), "unknown"),
])
def test_classify(exc: Exception, kind: str) -> None:
    assert classify(exc) == kind


def test_a_consumer_can_add_its_own_transient_errors() -> None:
    class Stale(Exception):
        pass
    assert classify(Stale()) == "unknown"
    assert classify(Stale(), (Stale,)) == "transient"


class _Flaky:
    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


NO_WAIT = (0.0, 0.0, 0.0)


async def test_transient_failures_are_retried_then_raised_as_they_are() -> None:
    ok = _Flaky(AutoReconnect("a"), AutoReconnect("b"))
    assert await attempt(ok, what="t", delays=NO_WAIT) == "done"
    assert ok.calls == 3
    never = _Flaky(*[AutoReconnect(str(i)) for i in range(10)])
    with pytest.raises(AutoReconnect):  # the caller rewinds: never dead-lettered
        await attempt(never, what="t", delays=NO_WAIT)
    assert never.calls == len(NO_WAIT) + 1


async def test_permanent_failures_give_up_at_once() -> None:
    flaky = _Flaky(DocumentTooLarge("too large"))
    with pytest.raises(GaveUp) as gave:
        await attempt(flaky, what="t", delays=NO_WAIT)
    assert flaky.calls == 1
    assert gave.value.poison.code == TOO_LARGE
    assert "too large" in gave.value.poison.detail


async def test_unknown_failures_are_retried_a_bounded_number_of_times_then_give_up() -> None:
    assert await attempt(_Flaky(RuntimeError("once")), what="t", delays=NO_WAIT) == "done"
    never = _Flaky(*[RuntimeError("again") for _ in range(10)])
    with pytest.raises(GaveUp) as gave:
        await attempt(never, what="t", delays=NO_WAIT)
    assert never.calls == len(NO_WAIT) + 1
    assert gave.value.poison.code == UNPROCESSABLE
    assert gave.value.poison.detail.startswith(f"failed {len(NO_WAIT) + 1} times")


def _record(offset: int, value: bytes) -> Any:
    return ConsumerRecord("t.in", 0, offset, 0, 0, b"k", value, None, 0, len(value), [])


async def test_settle_dead_letters_only_the_records_that_can_never_succeed() -> None:
    sent: list[tuple[str, bytes]] = []

    async def send(topic: str, value: bytes, key: bytes | None) -> None:
        sent.append((topic, value))

    settings = Settings(topic_prefix="t.")
    dlq = DeadLetters(send, topics_for(settings))
    done: list[str] = []
    dead: list[str] = []

    async def work(values: list[str]) -> None:
        if "huge" in values:
            raise DocumentTooLarge("update command document too large")
        done.extend(values)

    async def on_dead(value: str, poison: Any) -> None:
        dead.append(value)

    batch = [(_record(i, v.encode()), v) for i, v in enumerate(["a", "huge", "b"])]
    await settle(dlq, batch, work, what="t", delays=NO_WAIT, dead=on_dead)
    assert done == ["a", "b"] and dead == ["huge"]
    assert len(sent) == 1
    topic, value = sent[0]
    envelope = decode(value)
    assert topic == "t.in.dlq"
    assert envelope["reason"] == TOO_LARGE and envelope["offset"] == 1
    assert base64.b64decode(envelope["value_b64"]) == b"huge"


async def test_settle_raises_a_transient_failure_so_the_batch_is_read_again() -> None:
    async def send(topic: str, value: bytes, key: bytes | None) -> None:
        raise AssertionError("nothing may be dead-lettered while the store is away")

    dlq = DeadLetters(send, topics_for(Settings()))

    async def work(values: list[str]) -> None:
        raise AutoReconnect("the store is away")

    with pytest.raises(AutoReconnect):
        await settle(dlq, [(_record(0, b"a"), "a")], work, what="t", delays=NO_WAIT)


def test_a_dlq_record_always_fits_its_topic() -> None:
    """A record dead-lettered for being too large must not fail its own dead-lettering: the
    value goes whole while the DLQ record fits, else cut, with its length and hash."""
    import hashlib

    from shared.domain.poison import Poison
    from shared.kafka import DLQ_ROOM, dlq_envelope, encode

    poison = Poison(TOO_LARGE, "DocumentTooLarge")
    small = b'{"a": 1}'
    env = dlq_envelope("t", small, poison, key=b"k", partition=0, offset=1, max_bytes=1 << 20)
    assert base64.b64decode(env["value_b64"]) == small and env["value"] == small.decode()
    assert "value_truncated" not in env and env["key"] == "k"
    max_bytes = DLQ_ROOM + 300_000
    for size in (100_000, 224_000, 225_000, 1_000_000, 5_000_000):
        raw = bytes(range(256)) * (size // 256)
        env = dlq_envelope("t", raw, poison, key=b"k" * 100, partition=0, offset=1,
                           max_bytes=max_bytes)
        assert len(encode(env)) <= max_bytes, size
        kept = base64.b64decode(env["value_b64"])
        assert raw.startswith(kept)
        if kept != raw:
            assert env["value_truncated"] is True and env["value_bytes"] == len(raw)
            assert env["value_sha256"] == hashlib.sha256(raw).hexdigest()
        else:
            assert "value_truncated" not in env
    raw = b"x" * 200_000
    whole = dlq_envelope("t", raw, poison, key=None, partition=0, offset=1, max_bytes=max_bytes)
    assert base64.b64decode(whole["value_b64"]) == raw

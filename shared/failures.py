"""What a consumer does when its work on a record fails, in one place for every consumer
(storage, the dispatcher, the receipt tracker, admission's ``session.input``): the failure is
*transient* (the store or the broker is away: retried with backoff, then the record is read
again — never dead-lettered), *permanent* (the record can never succeed: a document too large
for the store, a record too large for a topic, a value that fails validation or cannot be
encoded — dead-lettered with the reason at once, its offset committed, the consumer moves on),
or *unknown* (anything else: retried a bounded number of times, then dead-lettered as
``unprocessable`` with what it raised). A record that can never succeed so never stalls its
partition, and a store outage never loses one (docs/reliability.md, "Failures while
processing")."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from aiokafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
)
from bson.errors import InvalidDocument
from pydantic import ValidationError
from pymongo.errors import (
    ConnectionFailure,
    DocumentTooLarge,
    ExecutionTimeout,
    OperationFailure,
    PyMongoError,
    WTimeoutError,
)

from shared.domain.poison import TOO_LARGE, UNPROCESSABLE, Poison
from shared.kafka import DeadLetters
from shared.logging import get_logger

log = get_logger(__name__)
T = TypeVar("T")
Kind = Literal["transient", "permanent", "unknown"]

# Waits between the attempts at one record's work: 0.2 + 0.5 + 1 + 2 s, then a transient
# failure rewinds the record (it is read again, and the cycle repeats: one failure logged every
# ~4 s, not a hot loop), an unknown one dead-letters it.
RETRY_DELAYS_S: tuple[float, ...] = (0.2, 0.5, 1.0, 2.0)

# The store or the broker is away or slow: nothing about the record.
TRANSIENT: tuple[type[BaseException], ...] = (
    ConnectionFailure,  # AutoReconnect, NetworkTimeout, ServerSelectionTimeoutError, …
    ExecutionTimeout, WTimeoutError, KafkaConnectionError, KafkaTimeoutError, OSError,
    TimeoutError)
# Too large for the store's 16 MB document or a topic's max.message.bytes.
TOO_LARGE_ERRORS: tuple[type[BaseException], ...] = (DocumentTooLarge, MessageSizeTooLargeError)
# The record itself cannot be stored, validated or encoded (``DocumentTooLarge`` is an
# ``InvalidDocument``; a lone surrogate raises ``UnicodeEncodeError``, a ``ValueError``).
PERMANENT: tuple[type[BaseException], ...] = (
    InvalidDocument, ValidationError, ValueError, TypeError, KeyError, AttributeError,
    IndexError, RecursionError)


# MongoDB's server-side refusals of a document over 16 MiB (BSONObjectTooLarge, and the codes
# an update that would grow a document past it gives); FerretDB stores what an insert brings.
TOO_LARGE_CODES = frozenset({10334, 17419, 17420})


def too_large_on_server(exc: BaseException) -> bool:
    if not isinstance(exc, OperationFailure):
        return False
    errors = (exc.details or {}).get("writeErrors") or [] if isinstance(exc.details, dict) else []
    return exc.code in TOO_LARGE_CODES or any(
        isinstance(e, dict) and e.get("code") in TOO_LARGE_CODES for e in errors)


def classify(exc: BaseException, transient: tuple[type[BaseException], ...] = ()) -> Kind:
    """``transient`` adds a consumer's own retryable errors (storage's stale decision)."""
    if isinstance(exc, TRANSIENT + transient):
        return "transient"
    if isinstance(exc, TOO_LARGE_ERRORS + PERMANENT) or too_large_on_server(exc):
        return "permanent"
    if isinstance(exc, PyMongoError) and (exc.has_error_label("RetryableWriteError")
                                          or exc.has_error_label("TransientTransactionError")):
        return "transient"
    if isinstance(exc, KafkaError) and exc.retriable:
        return "transient"
    return "unknown"


def poison_of(exc: BaseException, attempts: int = 1) -> Poison:
    """The DLQ reason of a failure that ends a record's processing."""
    # the type and the message (a repr would spend the 300 characters on the failing value);
    # a lone surrogate in the message is escaped, or the DLQ record could not be encoded
    detail = f"{type(exc).__name__}: {exc}".encode("utf-8", "backslashreplace").decode()[:300]
    if attempts > 1:
        detail = f"failed {attempts} times: {detail}"
    too_large = isinstance(exc, TOO_LARGE_ERRORS) or too_large_on_server(exc)
    code = TOO_LARGE if too_large else UNPROCESSABLE
    return Poison(code, detail)


@dataclass
class GaveUp(Exception):
    """The work on a record ended for good: this is why (its DLQ reason)."""

    poison: Poison


async def attempt(work: Callable[[], Awaitable[T]], *, what: str,
                  transient: tuple[type[BaseException], ...] = (),
                  delays: Sequence[float] = RETRY_DELAYS_S) -> T:
    """``work()`` with retries: a permanent failure raises ``GaveUp`` at once; a transient one
    is retried after each of ``delays`` and then raised as it is (the caller rewinds); an
    unknown one is retried as often and then raises ``GaveUp``."""
    tries = 0
    while True:
        tries += 1
        try:
            return await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            kind = classify(exc, transient)
            if kind == "permanent":
                raise GaveUp(poison_of(exc)) from exc
            if tries > len(delays):
                if kind == "unknown":
                    raise GaveUp(poison_of(exc, tries)) from exc
                raise
            log.warning("consumer.retry", work=what, failure=kind, attempt=tries,
                        error=repr(exc)[:300])
            await asyncio.sleep(delays[tries - 1])


async def settle(dlq: DeadLetters, batch: Sequence[tuple[Any, T]],
                 work: Callable[[list[T]], Awaitable[None]], *, what: str,
                 transient: tuple[type[BaseException], ...] = (),
                 delays: Sequence[float] = RETRY_DELAYS_S,
                 dead: Callable[[T, Poison], Awaitable[None]] | None = None) -> None:
    """``work`` on the values of ``batch`` ((raw record, value) pairs) with ``attempt``'s
    retries. When the batch fails for good, each value is worked on alone, and each that fails
    for good goes to the DLQ with its reason (then ``dead`` is told, e.g. to fail its Turn);
    the others are processed. A transient failure is raised (the batch is read again)."""
    if not batch:
        return
    try:
        await attempt(lambda: work([v for _, v in batch]), what=what, transient=transient,
                      delays=delays)
        return
    except GaveUp as gave_up:
        if len(batch) == 1:
            await _dead(dlq, batch[0], gave_up.poison, dead)
            return
    for one in batch:
        try:
            await attempt(functools.partial(work, [one[1]]), what=what, transient=transient,
                          delays=delays)
        except GaveUp as gave_up:
            await _dead(dlq, one, gave_up.poison, dead)


async def _dead(dlq: DeadLetters, one: tuple[Any, T], poison: Poison,
                dead: Callable[[T, Poison], Awaitable[None]] | None) -> None:
    await dlq.record(one[0], poison)
    if dead is not None:
        await dead(one[1], poison)


class Backoff:
    """The pause before a batch that failed transiently is read again (storage rewinds its
    batch itself): doubling from ``first`` to ``most``, back to ``first`` after a success."""

    def __init__(self, first: float = 0.2, most: float = 5.0) -> None:
        self.first, self.most = first, most
        self.next_s = first

    async def pause(self) -> None:
        delay, self.next_s = self.next_s, min(self.next_s * 2, self.most)
        await asyncio.sleep(delay)

    def reset(self) -> None:
        self.next_s = self.first

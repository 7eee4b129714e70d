"""What every service process shares: settings → logging → broker + store → topics and indexes,
a health server for the non-HTTP services, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

from aiokafka.structs import ConsumerRecord
from faststream.kafka import KafkaBroker

from shared.kafka import decode, to_dlq
from shared.logging import get_logger
from shared.topics import Topics

log = get_logger(__name__)


async def raw_decoder(msg: Any) -> Any:
    """Consumers decode records themselves so a malformed one goes to the DLQ with its reason
    instead of failing inside the framework."""
    return msg.body


async def decode_batch(
    broker: KafkaBroker, topics: Topics, raws: tuple[ConsumerRecord[bytes, bytes], ...] | Any
) -> list[tuple[ConsumerRecord[bytes, bytes], dict[str, Any]]]:
    if not isinstance(raws, tuple):
        raws = (raws,)
    out = []
    for r in raws:
        try:
            value = decode(r.value or b"")
            if not isinstance(value, dict) or not isinstance(value.get("schema"), str):
                raise ValueError("record is not a JSON object with a schema field")
        except ValueError as exc:
            await to_dlq(broker, topics, r.topic, r.value or b"", f"undecodable: {exc}", r.key)
            continue
        out.append((r, value))
    return out


async def run_until_stopped(
    start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
) -> None:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError):
            loop.add_signal_handler(sig, stopping.set)
    await start()
    try:
        await stopping.wait()
    finally:
        log.info("service.stopping")
        await stop()

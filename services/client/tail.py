"""Read one Session's Items from the public ``session.items`` topic (no consumer group: a tail
never moves anyone's offsets). Items arrive in ``sequence`` order per Session; a record seen
twice (a redelivery) is printed once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from shared.kafka import assigned_consumer, decode
from shared.settings import Settings, get_settings
from shared.topics import topics_for

Json = dict[str, Any]


def _settings(bootstrap: str | None, topic_prefix: str | None) -> Settings:
    s = get_settings()
    update: dict[str, Any] = {}
    if bootstrap:
        update["kafka_bootstrap_servers"] = bootstrap
    if topic_prefix is not None:
        update["topic_prefix"] = topic_prefix
    return s.model_copy(update=update) if update else s


async def tail_items(
    *,
    session_id: str,
    on_item: Callable[[Json], None],
    after: int = 0,
    follow: bool = False,
    until_turn_end: bool = False,
    timeout_s: float | None = None,
    bootstrap: str | None = None,
    topic_prefix: str | None = None,
) -> int:
    """Print (``on_item``) the Session's Items with ``sequence > after``: those already on the
    topic, then — with ``follow`` — new ones until Ctrl-C, ``timeout_s`` or (with
    ``until_turn_end``) the first terminal ``turn`` Item after ``after``. Returns how many were
    shown."""
    settings = _settings(bootstrap, topic_prefix)
    topic = topics_for(settings).session_items
    # from the beginning, without a group: it moves nobody's offsets
    c = await assigned_consumer(settings, topic, at_end=False, fetch_max_wait_ms=100)
    shown = 0
    last = after
    try:
        tps = list(c.assignment())
        if not tps:
            return 0
        ends = await c.end_offsets(tps)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        caught_up = False
        while True:
            if deadline is not None and time.monotonic() >= deadline:
                return shown
            batches = await c.getmany(timeout_ms=200)
            for recs in batches.values():
                for r in recs:
                    try:
                        item = decode(r.value or b"")
                    except ValueError:
                        continue
                    if not isinstance(item, dict) or item.get("session_id") != session_id:
                        continue
                    seq = item.get("sequence")
                    if not isinstance(seq, int) or seq <= last:
                        continue
                    last = seq
                    shown += 1
                    on_item({k: v for k, v in item.items() if k != "schema"})
                    if (follow and until_turn_end and item.get("type") == "turn"
                            and item.get("state") in ("completed", "failed")):
                        return shown
            if not caught_up:
                positions = {tp: await c.position(tp) for tp in tps}
                caught_up = all(positions[tp] >= ends[tp] for tp in tps)
                if caught_up and not follow:
                    return shown
    except asyncio.CancelledError:
        return shown
    finally:
        await c.stop()

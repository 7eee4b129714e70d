"""Background work that yields the store to the hot path: after a round that began at
``began`` (loop time), rest ``pace`` times as long as the round took, unless ``hurry`` is set
(a drain: stopping, partitions moving). Such work then takes at most 1 / (1 + ``pace``) of
the store's time. Used by storage's Session writer and the receipt tracker's deletes."""

from __future__ import annotations

import asyncio
import contextlib


async def rest_after(began: float, pace: float, hurry: asyncio.Event) -> None:
    if hurry.is_set():
        return
    took = asyncio.get_running_loop().time() - began
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(hurry.wait(), took * pace)

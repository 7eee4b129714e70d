from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.settings import Settings
from tests.support.system import System


@pytest.fixture
async def system(settings: Settings) -> AsyncIterator[System]:
    """The whole system on the real stack, with this test's own topics and database."""
    s = settings.model_copy(update={"auth_disabled": True, "binding_wait_timeout_s": 8.0,
                                    "runtime_heartbeat_timeout_s": 4.0, "topic_partitions": 2})
    sys_ = await System(s).start()
    try:
        yield sys_
    finally:
        await sys_.stop()

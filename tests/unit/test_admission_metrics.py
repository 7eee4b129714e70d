"""``session_core_admission_duration_seconds``: every write admission answers is timed, by
operation, whatever its answer (a 400 too), and the time covers the hand-over to storage and its
stored answer (what the SessionCoreAdmissionLatencyP99 alert watches). The body's upload and a
``?wait``'s wait for the Turn happen in the HTTP layer, outside these calls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import REGISTRY

from services.admission.core import Admission, Answer
from shared.settings import Settings
from shared.topics import Topics
from tests.support.builders import create_body

HAND_OVER_S = 0.05


def observed(operation: str) -> tuple[float, float]:
    """(count, sum) of the histogram for ``operation``."""
    labels = {"operation": operation}
    count = REGISTRY.get_sample_value("session_core_admission_duration_seconds_count", labels)
    total = REGISTRY.get_sample_value("session_core_admission_duration_seconds_sum", labels)
    return (count or 0.0, total or 0.0)


@pytest.fixture
def admission() -> Iterator[Admission]:
    # no store, broker or tails: the paths below never reach them
    adm = Admission(Settings(), Topics(), None, None, None, None, [])  # type: ignore[arg-type]
    yield adm
    adm.images.close()


async def test_a_refused_write_is_timed_by_its_operation(admission: Admission) -> None:
    before = observed("create_session"), observed("add_event")
    created = await admission.create_session({"harness": "nope"}, tenant="acme")
    added = await admission.add_event("not-a-session-id", {}, tenant="acme")
    assert (created.status, added.status) == (400, 400)
    after = observed("create_session"), observed("add_event")
    assert [a[0] - b[0] for a, b in zip(after, before, strict=True)] == [1, 1]


async def test_the_time_covers_the_hand_over_and_the_stored_answer(admission: Admission) -> None:
    async def slow_hand_over(record: dict[str, Any]) -> Answer:
        await asyncio.sleep(HAND_OVER_S)  # publish acks=all, then storage's answer
        return Answer(201, {"session_id": record["session_id"]})

    admission._hand_over = slow_hand_over  # type: ignore[method-assign]
    count0, sum0 = observed("create_session")
    answer = await admission.create_session(create_body("hello"), tenant="acme")
    assert answer.status == 201
    count1, sum1 = observed("create_session")
    assert count1 == count0 + 1
    assert sum1 - sum0 >= HAND_OVER_S

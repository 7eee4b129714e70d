"""Who is in a consumer group and which partitions each member owns, as the broker's group
coordinator says (DescribeGroups): what the chaos suite's rebalance row checks before it lets
the replicas leave — that each one really joined and took partitions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.protocol.admin import DescribeGroupsRequest_v1, DescribeGroupsRequest_v2
from aiokafka.protocol.api import Request

from shared.kafka import client_security
from shared.settings import Settings


@dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    partitions: tuple[tuple[str, int], ...]  # (topic, partition) assigned to it


class _DescribeGroups(Request[DescribeGroupsRequest_v1 | DescribeGroupsRequest_v2]):
    """DescribeGroups v1–v2. aiokafka 0.14 sends v3 to a broker that has it (Kafka 4 does) and
    decodes the answer with v2's schema (``DescribeGroupsRequest_v3.RESPONSE_TYPE``), which lacks
    v3's authorized operations: "Buffer underrun decoding string". v2 carries all we read."""

    API_KEY = 15

    def __init__(self, groups: list[str]) -> None:
        self._groups = groups

    def build(self, request_struct_class: type[DescribeGroupsRequest_v1 | DescribeGroupsRequest_v2]
              ) -> DescribeGroupsRequest_v1 | DescribeGroupsRequest_v2:
        return request_struct_class(self._groups)


async def describe(settings: Settings, groups: Iterable[str]) -> dict[str, list[Member]]:
    """Each group's members and their assignments (a group that is rebalancing has members
    without one yet)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap_servers,
                                **client_security(settings))
    await admin.start()
    try:
        out: dict[str, list[Member]] = {}
        for group in groups:
            node = await admin.find_coordinator(group)
            resp = await admin._send_request(_DescribeGroups([group]), node)
            for g in resp.to_object()["groups"]:
                members = []
                for m in g["members"]:
                    raw = m["member_assignment"]
                    parts = (ConsumerProtocolMemberAssignment.decode(raw).partitions()
                             if raw else [])
                    members.append(Member(m["member_id"], m["client_id"], tuple(sorted(
                        (tp.topic, tp.partition) for tp in parts))))
                out[g["group"]] = members
        return out
    finally:
        await admin.close()


def joined(before: dict[str, list[Member]], now: dict[str, list[Member]]) -> list[str]:
    """What is still missing for "every group has a member that was not in it ``before`` and
    every member of every group owns a partition" ([] when that holds)."""
    missing = []
    for group, members in now.items():
        old = {m.member_id for m in before.get(group, [])}
        if not any(m.member_id not in old for m in members):
            missing.append(f"{group}: no new member (members {len(members)})")
        idle = [m.member_id for m in members if not m.partitions]
        if idle:
            missing.append(f"{group}: members without partitions {idle}")
    return missing


def wait_joined(settings: Settings, groups: list[str], before: dict[str, list[Member]],
                timeout_s: float = 90.0) -> tuple[float, dict[str, list[Member]]]:
    """Block (a thread's ``asyncio.run``) until ``joined`` holds; the seconds it took and the
    groups then. Raises AssertionError with what was missing after ``timeout_s``."""
    t0 = time.monotonic()
    while True:
        now = asyncio.run(describe(settings, groups))
        missing = joined(before, now)
        if not missing:
            return time.monotonic() - t0, now
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"replicas did not join and take partitions in {timeout_s:.0f}"
                                 f" s: {missing}; groups {now}")
        time.sleep(0.5)

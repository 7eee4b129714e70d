"""The chart's Kafka ACL table (``deploy/helm/session-core/templates/kafka-acls.yaml``) for
tests: rendered by Helm from values, and added to a broker through the admin protocol
(CreateAcls, as ``kafka-acls.sh`` does; aiokafka has the request but no method for it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.admin import CreateAclsRequest

from shared.kafka import client_security
from shared.settings import Settings
from tests.support.helm import render

RESOURCE = {"Topic": 2, "Group": 3}
PATTERN = {"Literal": 3, "Prefixed": 4}
OPERATION = {"Read": 3, "Write": 4}
ALLOW = 3


@dataclass(frozen=True)
class Grant:
    principal: str
    operation: str
    resource: str
    pattern: str
    name: str


def chart_grants(*values: str) -> list[Grant]:
    """The rows of ``acls.tsv`` in the ConfigMap the chart renders with ``values``
    (``--set=…`` arguments)."""
    docs = render("--set=kafkaAcls.enabled=true", *values)
    [cm] = [d for d in docs if d["kind"] == "ConfigMap"
            and d["metadata"]["name"].endswith("-kafka-acls")]
    return [Grant(*line.split("\t")) for line in cm["data"]["acls.tsv"].splitlines() if line]


class _CreateAcls(CreateAclsRequest):
    """CreateAcls with many creations (aiokafka's builds one)."""

    def __init__(self, creations: list[tuple[Any, ...]]) -> None:
        self.creations = creations

    def build(self, request_struct_class: Any) -> Any:
        assert request_struct_class.API_VERSION >= 1
        return request_struct_class(self.creations)


async def add_grants(admin_settings: Settings, grants: list[Grant]) -> None:
    """Add ``grants`` as the admin principal of ``admin_settings``; raises on any error."""
    admin = AIOKafkaAdminClient(bootstrap_servers=admin_settings.kafka_bootstrap_servers,
                                **client_security(admin_settings))
    await admin.start()
    try:
        resp = await admin._send_request(_CreateAcls([
            (RESOURCE[g.resource], g.name, PATTERN[g.pattern], g.principal, "*",
             OPERATION[g.operation], ALLOW) for g in grants]))
        errors = [r for r in resp.creation_responses if r[0] != 0]
        assert not errors, errors
    finally:
        await admin.close()

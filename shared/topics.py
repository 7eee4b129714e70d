"""Topic names, once. Every name can be prefixed (``SESSION_CORE_TOPIC_PREFIX``)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.domain.tenancy import is_tenant
from shared.settings import Settings


@dataclass(frozen=True)
class Topics:
    prefix: str = ""
    # tenants with input topics of their own (``SESSION_CORE_INPUT_TENANTS``)
    tenants: tuple[str, ...] = ()

    def _t(self, name: str) -> str:
        return f"{self.prefix}{name}"

    # public (CONTRACT §2)
    @property
    def session_input(self) -> str:
        return self._t("session.input")

    @property
    def session_input_results(self) -> str:
        return self._t("session.input.results")

    def tenant_input(self, tenant: str) -> str:
        """``session.input.<tenant>``: only that tenant's producers may write here (ACLs)."""
        return self._t(f"session.input.{tenant}")

    def tenant_input_results(self, tenant: str) -> str:
        """``session.input.results.<tenant>``: the answers to that tenant's input topic."""
        return self._t(f"session.input.results.{tenant}")

    def input_tenant(self, topic: str) -> str | None:
        """The tenant whose input topic ``topic`` is; None for the shared ``session.input``."""
        for tenant in self.tenants:
            if topic == self.tenant_input(tenant):
                return tenant
        return None

    def input_results(self, topic: str) -> str:
        """Where the answers to a record of the input topic ``topic`` go."""
        tenant = self.input_tenant(topic)
        return self.session_input_results if tenant is None else self.tenant_input_results(tenant)

    @property
    def session_admitted(self) -> str:
        return self._t("session.admitted")

    @property
    def session_items(self) -> str:
        return self._t("session.items")

    @property
    def runtime_registrations(self) -> str:
        return self._t("runtime.registrations")

    @property
    def runtime_deliveries(self) -> str:
        return self._t("runtime.deliveries")

    @property
    def runtime_observations(self) -> str:
        return self._t("runtime.observations")

    # internal
    @property
    def storage_replies(self) -> str:
        """storage → admission: the stored answer for one admitted request (by request_id)."""
        return self._t("session.admitted.replies")

    @property
    def session_stored(self) -> str:
        """storage → dispatcher: input that is durable and must be delivered."""
        return self._t("session.stored")

    @property
    def core_facts(self) -> str:
        """dispatcher / receipt tracker → storage: turns, bindings, applications."""
        return self._t("core.facts")

    @property
    def runtime_control(self) -> str:
        """operators/tests → reference runtimes: misbehaviour switches (keyed by runtime_id)."""
        return self._t("runtime.control")

    def group(self, name: str) -> str:
        """Consumer group ids carry the prefix too: deployments (and test runs) that share a
        broker under different prefixes never share a group."""
        return f"{self.prefix}{name}"

    def dlq(self, topic: str) -> str:
        return f"{topic}.dlq"

    def all(self) -> list[str]:
        base = [
            self.session_input,
            self.session_input_results,
            self.session_admitted,
            self.session_items,
            self.runtime_registrations,
            self.runtime_deliveries,
            self.runtime_observations,
            self.storage_replies,
            self.session_stored,
            self.core_facts,
            self.runtime_control,
        ]
        for tenant in self.tenants:
            base += [self.tenant_input(tenant), self.tenant_input_results(tenant)]
        return base + [self.dlq(t) for t in base]

    @property
    def compacted(self) -> frozenset[str]:
        return frozenset({self.runtime_registrations})


def topics_for(settings: Settings) -> Topics:
    return Topics(prefix=settings.topic_prefix, tenants=input_tenants(settings))


def input_tenants(settings: Settings) -> tuple[str, ...]:
    """``SESSION_CORE_INPUT_TENANTS`` parsed: tenant names without a dot, and not ``results``
    (``session.input.results`` is the shared answers' topic, and with dots one tenant's input
    topic could be another's answers: ``results.acme``). ValueError for a bad one."""
    out = tuple(t.strip() for t in settings.input_tenants.split(",") if t.strip())
    bad = [n for n, t in enumerate(out) if not is_tenant(t) or "." in t or t == "results"]
    if bad:
        raise ValueError(f"SESSION_CORE_INPUT_TENANTS: entry {bad[0] + 1} is not a tenant name "
                         "that can name a topic (letters, digits, _ and -; not 'results')")
    return tuple(dict.fromkeys(out))


# --- topics as declared state (``session-core topics``, the chart's topics Job) ---------------


@dataclass(frozen=True)
class Declared:
    """What one topic must be: its partition count, replication factor and the configs this
    project sets (any other config is left as the cluster has it)."""

    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]


@dataclass(frozen=True)
class Existing:
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str]  # the topic's current values of (at least) the declared configs


@dataclass
class TopicPlan:
    """Differences between the declared topics and the cluster: what to create, which configs
    to alter (Kafka allows it in place), and what cannot be changed in place (``errors``, each
    one sentence that says what to do)."""

    create: list[Declared]
    alter: dict[str, dict[str, str]]
    errors: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors


def min_insync_replicas(replication_factor: int) -> int:
    """One replica may be down without refusing acks=all writes (3 → 2); never below 1."""
    return max(1, replication_factor - 1)


def declared_topics(settings: Settings, topics: Topics, max_record_bytes: int) -> list[Declared]:
    out = []
    for name in topics.all():
        cfg = {
            "max.message.bytes": str(max_record_bytes),
            "min.insync.replicas": str(min_insync_replicas(settings.topic_replication_factor)),
        }
        if name in topics.compacted:
            cfg["cleanup.policy"] = "compact"
        else:
            cfg["cleanup.policy"] = "delete"
            cfg["retention.ms"] = str(settings.topic_retention_ms)
        out.append(Declared(name, settings.topic_partitions, settings.topic_replication_factor,
                            cfg))
    return out


def plan_topics(declared: list[Declared], existing: dict[str, Existing]) -> TopicPlan:
    """Compare; never decide anything Kafka cannot undo. Partition counts are not changed in
    place: Kafka cannot remove partitions, and adding some moves Session keys to other
    partitions (the one writer per Session, and the co-partitioning of the Session topics,
    would break for the Sessions in flight). Replication factors need a partition
    reassignment, which is an operator's decision. Configs are altered."""
    plan = TopicPlan([], {}, [])
    for d in declared:
        e = existing.get(d.name)
        if e is None:
            plan.create.append(d)
            continue
        if e.partitions != d.partitions:
            why = ("Kafka cannot remove partitions" if e.partitions > d.partitions else
                   "adding partitions would move Session keys to other partitions and break "
                   "one writer per Session and the co-partitioning of the Session topics")
            plan.errors.append(
                f"topic {d.name} has {e.partitions} partitions, declared "
                f"{d.partitions} (SESSION_CORE_TOPIC_PARTITIONS): {why}; set "
                f"SESSION_CORE_TOPIC_PARTITIONS={e.partitions}, or drain and recreate the "
                f"topics (docs/deploy.md, \"Topics\")")
        if e.replication_factor != d.replication_factor:
            plan.errors.append(
                f"topic {d.name} has replication factor {e.replication_factor}, declared "
                f"{d.replication_factor} (SESSION_CORE_TOPIC_REPLICATION_FACTOR): change it "
                f"with a partition reassignment (kafka-reassign-partitions.sh), or set "
                f"SESSION_CORE_TOPIC_REPLICATION_FACTOR={e.replication_factor}")
        changed = {k: v for k, v in d.configs.items() if e.configs.get(k) != v}
        if changed:
            plan.alter[d.name] = changed
    # co-partitioning: every topic keyed by session_id must have one partition count, whatever
    # is declared (a hand-made topic set can differ even where each topic "exists")
    counts = {e.partitions for n, e in existing.items() if n in {d.name for d in declared}}
    if len(counts) > 1:
        detail = ", ".join(f"{n}={e.partitions}" for n, e in sorted(existing.items())
                           if n in {d.name for d in declared})
        plan.errors.append(f"the existing topics do not share one partition count ({detail}): "
                           "records of one Session would be read by different consumers")
    return plan

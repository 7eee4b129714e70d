"""Topic names, once. Every name can be prefixed (``SESSION_CORE_TOPIC_PREFIX``)."""

from __future__ import annotations

from dataclasses import dataclass

from shared.settings import Settings


@dataclass(frozen=True)
class Topics:
    prefix: str = ""

    def _t(self, name: str) -> str:
        return f"{self.prefix}{name}"

    # public (CONTRACT §2)
    @property
    def session_input(self) -> str:
        return self._t("session.input")

    @property
    def session_input_results(self) -> str:
        return self._t("session.input.results")

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
        return base + [self.dlq(t) for t in base]

    @property
    def compacted(self) -> frozenset[str]:
        return frozenset({self.runtime_registrations})


def topics_for(settings: Settings) -> Topics:
    return Topics(prefix=settings.topic_prefix)

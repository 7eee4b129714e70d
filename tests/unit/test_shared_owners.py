"""``shared/`` keeps only what two or more services use; a rule one service uses lives in that
service's package (docs/architecture.md, "Layout"). The importers of each shared module come from
``tests/support/owners.py`` (``python -m tests.support.owners`` prints the map): the service
packages that import it, and those that use it through another shared module; the Runtime, the
scripted model server and the demo count as users too (why: the last test). And the pure
domain — ``shared/domain/`` and each service's ``domain/`` — imports no Kafka or MongoDB client,
directly or through what it imports."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import owners

# Shared modules that stay in shared/ with fewer than two service users, and why. What an
# exception imports stays with it (shared/ never imports a service's package).
EXCEPTIONS = {
    # writes the public record contracts of every topic (docs/schemas/, docs/asyncapi.json) from
    # the record models (`python -m shared.messages.generate`): the wire contract with external
    # Runtimes, producers and consumers; only admission's OpenAPI imports it today
    "shared.messages.generate",
    # the table of which service owns each store collection: a declaration about every service,
    # read by tests/unit/test_collection_ownership.py, imported by no service
    "shared.ownership",
    # writes docs/settings.md from shared.settings (`python -m shared.settingsdoc`); no service
    # runs it
    "shared.settingsdoc",
}
IO_CLIENTS = {"aiokafka", "kafka", "confluent_kafka", "pymongo", "bson", "motor"}


def kept_by_an_exception() -> set[str]:
    """The exceptions and every shared module they import, transitively."""
    modules = set(owners.shared_modules())
    kept, todo = set(EXCEPTIONS), list(EXCEPTIONS)
    while todo:
        path = owners.module_path(todo.pop())
        assert path is not None
        for imported in owners.imported_modules(path):
            if imported in modules and imported not in kept:
                kept.add(imported)
                todo.append(imported)
    return kept


def test_every_shared_module_has_two_users() -> None:
    direct, users = owners.importer_map()
    kept = kept_by_an_exception()
    lonely = {m: sorted(users[m]) for m in direct
              if len(users[m]) < 2 and m not in kept and not owners.is_trivial(m)}
    assert not lonely, "shared modules used by fewer than two services (move each into its " \
        "service's package): " + "; ".join(
            f"{m}: users {u or 'none'}, imported directly by {sorted(direct[m]) or 'none'}, "
            f"by shared {owners.shared_importers_of(m) or 'none'}" for m, u in lonely.items())


def test_the_exceptions_are_still_exceptions() -> None:
    """An exception that has gained a second user (or gone) leaves the list."""
    direct, users = owners.importer_map()
    assert EXCEPTIONS <= set(direct)
    assert not {m for m in EXCEPTIONS if len(users[m]) >= 2}


def _third_party(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_domain_imports_no_kafka_or_mongodb_client() -> None:
    domains = [owners.ROOT / "shared" / "domain",
               *sorted(p for p in (owners.ROOT / "services").glob("*/domain") if p.is_dir())]
    impure: dict[str, list[str]] = {}
    for folder in domains:
        for start in sorted(folder.rglob("*.py")):
            seen, todo, clients = {start}, [start], set()
            while todo:
                path = todo.pop()
                clients |= _third_party(path) & IO_CLIENTS
                for name in owners.imported_modules(path):
                    module = owners.module_path(name)
                    if module is not None and module not in seen:
                        seen.add(module)
                        todo.append(module)
            if clients:
                impure[owners.module_name(start)] = sorted(clients)
    assert not impure, f"pure domain modules reaching a Kafka or MongoDB client: {impure}"


def test_the_runtime_counts_as_a_user_and_imports_no_service() -> None:
    """The Runtime (``runtimes/``) is not a Core service, yet it counts as a user for the rule:
    it is the other end of Core's Kafka wire, so what it shares with the services must be spelled
    once for both — the record schemas, each harness's native records, the delivery wire, and
    receipt matching (``shared.domain.receipts``: the conformance kit matches receipts exactly as
    the tracker does). A module one service and the Runtime use stays in ``shared/``; moving it
    into the service would make the Runtime import that service. So no other product imports a
    service's package (the umbrella CLI, ``services/cli.py``, is where they meet)."""
    packages = owners.services()
    assert set(owners.OTHER_PRODUCTS) <= set(packages)
    crossing = sorted(f"{owners.module_name(path)} → {name}"
                      for product in owners.OTHER_PRODUCTS for path in packages[product]
                      for name in owners.imported_modules(path)
                      if name.split(".")[0] == "services")
    assert not crossing, crossing

"""No service touches a store collection it does not own (``shared/ownership.py``): each
service's code — its package and the shared modules it imports — is grepped for collection
accesses (``db.<name>``, ``db["<name>"]``, ``get_collection("<name>")``). A granted read
(admission serving storage's read model) must stay a read."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from shared.ownership import OWNERS, READ_GRANTS, owned_by

ROOT = Path(__file__).resolve().parents[2]
# each service package, and the other products' packages (the Runtime, the scripted model server,
# the demo): they own no collection, so any access of theirs fails here
PACKAGES = {p.name: p for p in sorted((ROOT / "services").iterdir())
            if p.is_dir() and (p / "__init__.py").exists()}
PACKAGES |= {name: ROOT / name for name in ("runtimes", "scripted_model", "demo")}
SERVICES = sorted(PACKAGES)
ACCESS = re.compile(r"""\bdb\s*\.\s*(?!get_collection\b)([a-z_]+)\b|\bdb\s*\[\s*["']([a-z_]+)["']"""
                    r"""|get_collection\(\s*["']([a-z_]+)["']""")
NOT_COLLECTIONS = {"command", "client", "name", "list_collection_names", "create_collection",
                   "drop_collection", "get_collection", "codec_options", "with_options"}
WRITES = re.compile(r"\b(insert|update|delete|replace|bulk_write|create_index|drop|"
                    r"find_one_and_|insert_ignoring_duplicates|insert_in_order)")


Scope = dict[Path, "set[str] | None"]  # a module → the names used from it (None: all of it)


def shared_imports(path: Path) -> Scope:
    """The ``shared`` modules ``path`` imports, and which of their names."""
    found: Scope = {}

    def add(module: Path, names: set[str] | None) -> None:
        if names is None or (module in found and found[module] is None):
            found[module] = None
        else:
            found[module] = (found.get(module) or set()) | names

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] != "shared":
                continue
            base = ROOT / Path(*node.module.split("."))
            for a in node.names:
                sub = base / f"{a.name}.py"
                if sub.exists():  # ``from shared import itemstore``: the whole module
                    add(sub, None)
                elif base.with_suffix(".py").exists():
                    add(base.with_suffix(".py"), {a.name})
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "shared":
                    module = ROOT / Path(*a.name.split("."))
                    if module.with_suffix(".py").exists():
                        add(module.with_suffix(".py"), None)
    return found


def code_of(service: str) -> Scope:
    """The service's own modules, and the shared modules (or the functions and classes of
    them) it uses, transitively."""
    scope: Scope = {p: None for p in PACKAGES[service].rglob("*.py")}
    todo = list(scope)
    while todo:
        for module, names in shared_imports(todo.pop()).items():
            before = scope.get(module, set())
            if module in scope and before is None:
                continue
            merged = None if names is None else (before or set()) | names
            if module not in scope or merged != before:
                scope[module] = merged
                todo.append(module)
    return scope


def source_of(path: Path, names: set[str] | None) -> list[tuple[int, str]]:
    lines = path.read_text().splitlines()
    if names is None:
        return list(enumerate(lines, 1))
    out: list[tuple[int, str]] = []
    for node in ast.parse("\n".join(lines)).body:
        if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                and node.name in names):
            end = node.end_lineno or node.lineno
            out += [(n, lines[n - 1]) for n in range(node.lineno, end + 1)]
    return out


def accesses(scope: Scope) -> dict[str, list[str]]:
    """Collection → the lines touching it."""
    out: dict[str, list[str]] = {}
    for path, names in sorted(scope.items()):
        for n, line in source_of(path, names):
            for m in ACCESS.finditer(line):
                name = next(g for g in m.groups() if g)
                if name not in NOT_COLLECTIONS:
                    out.setdefault(name, []).append(
                        f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    return out


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_touches_only_the_collections_it_owns(service: str) -> None:
    found = accesses(code_of(service))
    unknown = {c: lines for c, lines in found.items() if c not in OWNERS}
    assert not unknown, f"collections missing from shared/ownership.py: {unknown}"
    allowed = owned_by(service) | READ_GRANTS.get(service, frozenset())
    foreign = {c: lines for c, lines in found.items() if c not in allowed}
    assert not foreign, f"{service} touches collections it does not own: {foreign}"
    for c in READ_GRANTS.get(service, frozenset()) - owned_by(service):
        writes = [line for line in found.get(c, []) if WRITES.search(line)]
        assert not writes, f"{service} may only read {c}: {writes}"


def test_the_dispatcher_owns_its_collections_and_admission_does_not_read_them() -> None:
    assert owned_by("dispatcher") == {"bindings", "pending_deliveries", "leases"}
    assert set(accesses(code_of("dispatcher"))) == owned_by("dispatcher")
    assert not set(accesses(code_of("admission"))) & owned_by("dispatcher")


def test_the_grep_sees_a_foreign_access() -> None:
    """The pattern finds what a service could write (so a clean result means something)."""
    sample = ROOT / "services" / "dispatcher" / "binder.py"
    lines = ['x = await self.db.sessions.find_one({})', 'self.db["items"].insert_one(d)',
             'db.get_collection("calls")']
    assert [next(g for g in m.groups() if g) for line in lines
            for m in ACCESS.finditer(line)] == ["sessions", "items", "calls"]
    assert sample in code_of("dispatcher")

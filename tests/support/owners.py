"""Which service packages use each module of ``shared/`` — the map behind the rule that
``shared/`` keeps only what two or more services use (a rule one service uses lives in that
service's package). ``tests/unit/test_shared_owners.py`` checks the rule;
``python -m tests.support.owners`` prints the map.

A user package is one of ``services/<name>/``, ``services/cli.py`` (the umbrella CLI), the
other products beside the services — ``runtimes/`` (the Runtime), ``scripted_model/`` (the
scripted model server), ``demo/`` — and ``session_core_client/``; tests, bench/ and deploy/ use
anything and own nothing. Imports are read
with ``ast``: ``import a.b``, ``from a.b import c`` (``c`` a submodule → that module, otherwise
the module ``a.b`` itself), relative imports, and imports inside functions.

``direct``: the services whose own modules import a shared module. ``users``: those, and the
users of every shared module that imports it (a helper of a shared module serves whoever uses
that module)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The top-level packages that are not services but use shared/ as one: the Runtime is the other
# end of Core's Kafka wire (deliveries, observations, registrations), so the record models, topic
# names and Kafka plumbing it shares with the services are what shared/ is for — a module used by
# one service and the Runtime stays in shared/ rather than make the Runtime import a service.
OTHER_PRODUCTS = ("runtimes", "scripted_model", "demo")


def services() -> dict[str, list[Path]]:
    """Each user package → its Python files."""
    found: dict[str, list[Path]] = {}
    for package in sorted((ROOT / "services").iterdir()):
        if package.is_dir() and (package / "__init__.py").exists():
            found[f"services/{package.name}"] = sorted(package.rglob("*.py"))
    found["services/cli.py"] = [ROOT / "services" / "cli.py"]
    for product in OTHER_PRODUCTS:
        found[product] = sorted((ROOT / product).rglob("*.py"))
    found["session_core_client"] = sorted((ROOT / "session_core_client").rglob("*.py"))
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def module_path(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def imported_modules(path: Path) -> Iterator[str]:
    """The dotted names of the modules ``path`` imports (existing ones in this tree only)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if module_path(alias.name):
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                stem = package[:len(package) - node.level + 1]
                base = ".".join(stem + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if module_path(sub):
                    yield sub
                elif module_path(base):
                    yield base


def shared_modules() -> list[str]:
    return sorted(module_name(p) for p in (ROOT / "shared").rglob("*.py"))


def is_trivial(name: str) -> bool:
    """A package's ``__init__.py`` with no code (only a docstring, or nothing)."""
    path = module_path(name)
    assert path is not None
    body = ast.parse(path.read_text()).body
    return path.name == "__init__.py" and all(
        isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body)


def importer_map() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(direct, users): each shared module → the service packages that import it directly,
    and → those plus the users of the shared modules that import it."""
    modules = shared_modules()
    direct: dict[str, set[str]] = {m: set() for m in modules}
    for service, files in services().items():
        for path in files:
            for imported in imported_modules(path):
                if imported in direct:
                    direct[imported].add(service)
    shared_importers: dict[str, set[str]] = {m: set() for m in modules}
    for m in modules:
        source = module_path(m)
        assert source is not None
        for imported in imported_modules(source):
            if imported in shared_importers and imported != m:
                shared_importers[imported].add(m)
    users = {m: set(s) for m, s in direct.items()}
    changed = True
    while changed:
        changed = False
        for m in modules:
            for importer in shared_importers[m]:
                if not users[importer] <= users[m]:
                    users[m] |= users[importer]
                    changed = True
    return direct, users


def shared_importers_of(name: str) -> list[str]:
    return sorted(m for m in shared_modules()
                  if m != name and name in set(imported_modules(module_path(m) or Path())))


def _short(packages: set[str]) -> str:
    return ",".join(sorted(p.removeprefix("services/") for p in packages)) or "-"


def main() -> int:
    direct, users = importer_map()
    width = max(map(len, direct))
    for m in sorted(direct):
        if is_trivial(m):
            continue
        via = shared_importers_of(m)
        sys.stdout.write(f"{m:<{width}}  direct: {_short(direct[m]):<40} users: {_short(users[m])}"
                         + (f"  (via {', '.join(via)})" if users[m] - direct[m] else "") + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""One model per record: every record schema name (``"runtime.delivery/1"``) and the harness and
placement enumerations are spelled once in the product code — the services, ``shared/``, the
Runtime (``runtimes/``) and every other top-level package but those in ``NOT_PRODUCT`` — in
``shared/messages/schemas.py``; builders, decoders, contracts and the Runtime import them from
there. A second spelling anywhere in that code fails here.

The code is read with ``ast``: a schema name is a ``str`` constant that is the whole of a name
of the project's form ``<dotted.name>/<version>`` (``session.input.result/1``, ``dlq.record/1``),
so a docstring or a description that mentions one is not a second spelling. An enumeration is a
``Literal[...]`` naming two or more harnesses (or placements), or a tuple, list or set display
naming all of them; a plain use of one name (``"codex"``, a default placement list) is not."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The product code is every top-level package but these (so the Runtimes' code is scanned
# wherever it lives):
NOT_PRODUCT = {
    "tests": "spells records out as data",
    "bench": "spells records out as data, like the tests",
    "deploy": "the local-stack launcher; imports nothing of the product",
    "session_core_client": "its own distribution (httpx only); cannot import shared/",
}
SCHEMA_NAME = re.compile(r"[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+/[1-9][0-9]*")

Places = dict[str, list[str]]


def product_files() -> list[Path]:
    packages = sorted(p for p in ROOT.iterdir()
                      if (p / "__init__.py").is_file() and p.name not in NOT_PRODUCT)
    return [f for p in packages for f in sorted(p.rglob("*.py"))]


def _place(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 0)}"


def _strings(nodes: list[ast.expr]) -> set[str]:
    return {n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _literal_args(node: ast.Subscript) -> list[ast.expr] | None:
    """The arguments of ``Literal[...]`` (``typing.Literal[...]`` too), else None."""
    name = node.value
    if not ((isinstance(name, ast.Name) and name.id == "Literal")
            or (isinstance(name, ast.Attribute) and name.attr == "Literal")):
        return None
    return list(node.slice.elts) if isinstance(node.slice, ast.Tuple) else [node.slice]


def _nodes() -> Iterator[tuple[Path, ast.AST]]:
    for path in product_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            yield path, node


def schema_names() -> Places:
    """Each schema name → where it is spelled."""
    found: Places = defaultdict(list)
    for path, node in _nodes():
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and SCHEMA_NAME.fullmatch(node.value)):
            found[node.value].append(_place(path, node))
    return found


def enumerations(names: set[str]) -> list[str]:
    """Where ``names`` (or two or more of them, in a ``Literal``) are enumerated."""
    found, arguments = [], set()  # a Literal's arguments are not a tuple display of their own
    for path, node in _nodes():
        if isinstance(node, ast.Subscript):
            args = _literal_args(node)
            if args is not None:
                arguments.add(id(node.slice))
                if len(_strings(args) & names) >= 2:
                    found.append(_place(path, node))
        elif (isinstance(node, ast.Tuple | ast.List | ast.Set) and id(node) not in arguments
              and _strings(node.elts) >= names):
            found.append(_place(path, node))
    return found


def test_every_schema_name_is_spelled_once() -> None:
    found = schema_names()
    assert found, "no schema name found: is SCHEMA_NAME still the project's naming?"
    twice = {name: places for name, places in found.items() if len(places) > 1}
    assert not twice, "schema names spelled in more than one place (import the constant from " \
        "shared/messages/schemas.py):\n" + "\n".join(
            f"  {name!r}: {', '.join(places)}" for name, places in sorted(twice.items()))


def test_every_schema_name_is_named_in_the_schemas_module() -> None:
    """The one place is shared/messages/schemas.py, and each of its names has the form the scan
    looks for (so a name of another form cannot escape it)."""
    from shared.messages import schemas

    found = schema_names()
    elsewhere = {name: places for name, places in found.items()
                 if any(not p.startswith("shared/messages/schemas.py:") for p in places)}
    assert not elsewhere
    assert set(schemas.ALL) == set(found)
    assert all(SCHEMA_NAME.fullmatch(name) for name in schemas.ALL)


def test_the_harness_and_placement_names_are_enumerated_once() -> None:
    from shared.domain.harness import HARNESSES, PLACEMENTS, PROFILES

    assert set(HARNESSES) == set(PROFILES)
    twice = {what: places for what, names in (("harnesses", set(HARNESSES)),
                                               ("placements", set(PLACEMENTS)))
             if len(places := enumerations(names)) > 1}
    assert not twice, "enumerated in more than one place (import HarnessName / HARNESSES / " \
        "Placement / PLACEMENTS from shared/messages/schemas.py):\n" + "\n".join(
            f"  {what}: {', '.join(places)}" for what, places in sorted(twice.items()))


def test_the_scan_covers_the_services_shared_and_the_runtime() -> None:
    scanned = {f.relative_to(ROOT).parts[0] for f in product_files()}
    assert {"services", "shared", "runtimes", "scripted_model", "demo"} <= scanned

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
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

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



# --------------------------------------------------------------------------- one model each
def _members(model: Any) -> set[type]:
    """The classes of one record's model: the class, or every member of its (nested,
    discriminated) union."""
    if isinstance(model, type):
        return {model}
    return {c for arg in get_args(model) for c in _members(arg)}


def _declaring(cls: type) -> set[type]:
    """``cls`` and each base of it that declares the record's ``schema`` field itself (the
    common envelope of a union's members is part of that one model)."""
    return {c for c in cls.__mro__ if "schema_" in getattr(c, "__annotations__", {})}


def _where(cls: type) -> str:
    return f"{Path(sys.modules[cls.__module__].__file__ or '').relative_to(ROOT)}::{cls.__name__}"


def record_classes(trees: list[tuple[str, ast.AST]] | None = None) -> dict[str, list[str]]:
    """Each class in the product code (or ``trees``: label, module) that declares a record's
    ``schema`` field (``schema_: <Name>Schema``, a type of shared/messages/schemas.py), or that
    subclasses a class of a record's model → ``path::Class``, by schema name (a subclass: by
    ``subclass of <Class>``)."""
    from shared.messages import catalog, schemas

    if trees is None:
        trees = [(str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path)))
                 for path in product_files()]
    model_names = {c.__name__ for m in catalog.MODELS.values() for c in _members(m)}
    found: dict[str, list[str]] = defaultdict(list)
    for label, tree in trees:
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            place = f"{label}::{node.name}"
            for stmt in node.body:
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and stmt.target.id == "schema_"):
                    for name in re.findall(r"\b(\w+Schema)\b", ast.unparse(stmt.annotation)):
                        found[get_args(getattr(schemas, name))[0]].append(place)
            for base in node.bases:
                name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
                if name in model_names:
                    found[f"subclass of {name}"].append(place)
    return found


def second_models(found: dict[str, list[str]]) -> dict[str, list[str]]:
    """What ``found`` holds beyond each record's one model (``catalog.MODELS``)."""
    from shared.messages import catalog

    allowed = {schema: {_where(c) for m in _members(model) for c in _declaring(m)}
               for schema, model in catalog.MODELS.items()}
    extra = {what: sorted(set(places) - allowed.get(what, set()))
             for what, places in found.items()}
    return {what: places for what, places in extra.items() if places}


def test_every_record_has_one_model() -> None:
    """One pydantic model per record (issue 60): the model ``shared.messages.catalog.MODELS``
    names for its schema — one class, or one discriminated union of classes that share an
    envelope — which consumers decode with, builders are checked against and the published
    schemas come from. A second model of a record anywhere in the product code (a consumer's
    own view, a subclass of a record model) fails here."""
    from shared.messages import catalog, schemas

    assert set(catalog.MODELS) == set(schemas.ALL)
    found = record_classes()
    assert set(schemas.ALL) <= set(found), "the scan sees no model of some records"
    second = second_models(found)
    assert not second, "a second model of a record (use its one model in shared/messages/, " \
        "catalog.MODELS):\n" + "\n".join(
            f"  {what}: {', '.join(places)}" for what, places in sorted(second.items()))


def test_the_one_model_check_sees_a_second_model() -> None:
    """A consumer's own view of ``runtime.delivery/1`` (what ``shared/typedrecords.py`` held
    beside ``shared/contracts.py``) and a subclass of a record model are each found."""
    source = ("from pydantic import BaseModel, Field\n"
              "from shared.messages import runtime, schemas\n"
              "class Delivery(BaseModel):\n"
              "    schema_: schemas.DeliverySchema = Field(alias='schema')\n"
              "class MyRegistration(runtime.RuntimeRegistration):\n    pass\n")
    found = record_classes([("shared/probe.py", ast.parse(source))])
    assert second_models(found) == {
        "runtime.delivery/1": ["shared/probe.py::Delivery"],
        "subclass of RuntimeRegistration": ["shared/probe.py::MyRegistration"]}

"""Admission is one pass: envelope, then content, then harness profile. Each step may use the
steps after it and the shared helpers, never one before it, so a body goes down once."""

from __future__ import annotations

import ast
from pathlib import Path

import services.admission.domain.validation as validation

PACKAGE = Path(validation.__file__).parent
# the pass from top to bottom; the helpers below every step share one rank
RANK = {"__init__": 0, "envelope": 1, "content": 2, "profile": 3,
        "admitted": 4, "limits": 4, "values": 4}


def _imported_steps(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "services.admission.domain.validation":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("services.admission.domain.validation."):
                found.add(node.module.rsplit(".", 1)[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("services.admission.domain.validation."):
                    found.add(alias.name.rsplit(".", 1)[1])
    return found


def test_every_module_of_the_package_has_a_rank() -> None:
    assert {p.stem for p in PACKAGE.glob("*.py")} == set(RANK)


def test_no_step_calls_back_into_one_before_it() -> None:
    for module, rank in RANK.items():
        for target in _imported_steps(module):
            assert RANK[target] > rank, f"{module} imports {target}"

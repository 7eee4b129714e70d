"""``docs/settings.md``, generated from ``shared.settings.Settings``: each setting's variable,
default and bounds from the model, its meaning from the comment beside or above it in the
source. ``python -m shared.settingsdoc`` rewrites the file; a test fails when it drifts."""

from __future__ import annotations

import ast
import inspect
import io
import sys
import tokenize
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from shared import settings as settings_module
from shared.settings import Settings

DOC = Path(__file__).resolve().parent.parent / "docs" / "settings.md"

HEADER = """# Settings

Every setting is an environment variable with the `SESSION_CORE_` prefix, except the two
infrastructure addresses platforms set by their well-known names (`KAFKA_BOOTSTRAP_SERVERS`,
`MONGODB_URI`; the prefixed names work too). The Helm chart sets them from its values
(docs/deploy.md). Generated from `shared/settings.py` by `python -m shared.settingsdoc`; a test
fails when this page and the code differ.
"""


def _comments(source: str) -> tuple[dict[int, str], dict[int, str]]:
    """Comment lines of their own, and comments beside code, by line number."""
    alone: dict[int, str] = {}
    beside: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            (alone if tok.line.strip().startswith("#") else beside)[tok.start[0]] = text
    return alone, beside


def _env(name: str, info: FieldInfo) -> str:
    alias = info.validation_alias
    choices = getattr(alias, "choices", None)
    if choices:
        return " / ".join(f"`{c}`" for c in choices)
    return f"`SESSION_CORE_{name.upper()}`"


def _default(info: FieldInfo) -> str:
    value: Any = info.default
    if value is None:
        return "unset"
    if value == "":
        return '`""`'
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def _bounds(info: FieldInfo) -> str:
    marks = []
    for m in info.metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            v = getattr(m, attr, None)
            if v is not None:
                marks.append(f"{sign} {v}")
    return ", ".join(marks)


def reference() -> str:
    source = inspect.getsource(settings_module)
    alone, beside_code = _comments(source)
    cls = next(n for n in ast.parse(source).body
               if isinstance(n, ast.ClassDef) and n.name == Settings.__name__)
    lines = [HEADER]
    for node in cls.body:
        line = node.lineno
        # the comment lines directly above a field, up to a section header
        above: list[str] = []
        n = line - 1
        while n in alone and not alone[n].startswith("---"):
            above.insert(0, alone[n])
            n -= 1
        header = alone.get(n, "")
        if header.startswith("---"):
            title = header.strip("- ").split("(")[0].strip()
            lines += [f"\n## {title[0].upper()}{title[1:]}\n",
                      "| variable | default | meaning |", "|---|---|---|"]
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        name = node.target.id
        info = Settings.model_fields[name]
        end = node.end_lineno or line
        beside = [beside_code[k] for k in range(line, end + 1) if k in beside_code]
        meaning = " ".join(above + beside).replace("|", "\\|")
        bounds = _bounds(info)
        if bounds:
            meaning = f"{meaning} ({bounds})" if meaning else bounds
        lines.append(f"| {_env(name, info)} | {_default(info)} | {meaning} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    DOC.write_text(reference(), encoding="utf-8")
    print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Writes the generated contract documents from the record models (``shared.messages``):
``docs/schemas/<topic>.json`` for every public topic and ``docs/asyncapi.json``
(``python -m shared.messages.generate``; tests/unit/test_contracts.py fails when a checked-in
file drifts).

Versioning: every record names ``schema`` (``"session.item/1"``). A new optional field keeps the
version (consumers ignore fields they do not know); a removed, renamed or re-meant field makes
``/2`` (docs/client.md, "Consuming `session.items`", its schema versions).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from shared.messages.catalog import PUBLIC as SCHEMAS

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "schemas"


def name_nested_unions(value: Any, defs: dict[str, Any], ref_template: str) -> Any:
    """``value`` with each union nested in a discriminated union (the message Items, by
    ``role`` under ``type: message``) made a named schema in ``defs``: pydantic writes it inline
    as a discriminator ``mapping`` value, where JSON Schema / OpenAPI / AsyncAPI want a
    reference. Returns the rewritten value; ``defs`` gains ``AnyMessageItem``."""
    if isinstance(value, list):
        return [name_nested_unions(v, defs, ref_template) for v in value]
    if not isinstance(value, dict):
        return value
    out = {k: name_nested_unions(v, defs, ref_template) for k, v in value.items()}
    disc = out.get("discriminator")
    mapping = disc.get("mapping") or {} if isinstance(disc, dict) else {}
    for tag, target in list(mapping.items()):
        if isinstance(target, dict):
            name = f"Any{tag.title().replace('_', '')}Item"
            defs[name] = target
            ref = ref_template.format(model=name)
            mapping[tag] = ref
            out["oneOf"] = [{"$ref": ref} if v == target else v for v in out.get("oneOf", [])]
    return out


def json_schema(name: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one topic's records, as a consumer reads them."""
    schema: dict[str, Any] = TypeAdapter(SCHEMAS[name]).json_schema(by_alias=True,
                                                                     mode="serialization")
    named: dict[str, Any] = {}
    schema = name_nested_unions(schema, named, "#/$defs/{model}")
    if named:
        schema["$defs"] = dict(sorted({**schema.get("$defs", {}), **named}.items()))
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://session-core.dev/schemas/{name}.json"
    schema.setdefault("title", name)
    return schema


def rendered(name: str) -> str:
    return json.dumps(json_schema(name), indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``docs/schemas/<topic>.json`` for every public topic (and ``docs/asyncapi.json``)."""
    SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
    for name in SCHEMAS:
        (SCHEMA_DIR / f"{name}.json").write_text(rendered(name))
    from shared.messages.asyncapi import rendered as asyncapi_rendered

    (SCHEMA_DIR.parent / "asyncapi.json").write_text(asyncapi_rendered())
    sys.stdout.write(f"wrote {len(SCHEMAS)} schemas to {SCHEMA_DIR} and docs/asyncapi.json\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

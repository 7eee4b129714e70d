"""How documents hold free-form JSON. Client-supplied values (metadata, tool arguments, function
outputs, whole Items) are stored as JSON text, not as BSON trees: the text round-trips byte for
byte (key order, integers beyond int64, nested arrays — which FerretDB v1 cannot store) and the
store never reinterprets them. Fields the services query on stay native."""

from __future__ import annotations

import json
from typing import Any

from shared.storekeys import item_key

FREEFORM = ("submission", "arguments", "answer", "body", "metadata")


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def pack(doc: dict[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    for k in FREEFORM:
        if k in out:
            out[f"{k}_json"] = dumps(out.pop(k))
    return out


def unpack(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if doc is None:
        return None
    out = dict(doc)
    for k in FREEFORM:
        if f"{k}_json" in out:
            out[k] = json.loads(out.pop(f"{k}_json"))
    return out


def item_doc(item: dict[str, Any], source_key: str) -> dict[str, Any]:
    """An Item as stored: the indexed fields, plus the whole public Item as JSON text."""
    return {
        "_id": item_key(item["session_id"], item["sequence"]),
        "id": item["id"],
        "session_id": item["session_id"],
        "sequence": item["sequence"],
        "type": item["type"],
        "source_key": source_key,
        "body": dumps(item),
    }


def item_from_doc(doc: dict[str, Any]) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(doc["body"])
    return value

"""Public ids are a prefix plus 32 lowercase hex digits (CONTRACT §1)."""

from __future__ import annotations

import re
import uuid
from typing import Literal

Prefix = Literal["session", "item", "evt", "rt", "turn", "call", "dlv", "req"]

_ID_RE = re.compile(r"^(?P<prefix>[a-z]+)_(?P<hex>[0-9a-f]{32})$")


def new_id(prefix: Prefix) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def is_id(value: object, prefix: Prefix) -> bool:
    if not isinstance(value, str):
        return False
    m = _ID_RE.match(value)
    return m is not None and m.group("prefix") == prefix

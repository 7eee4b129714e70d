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


# A client's ``X-Request-Id`` is echoed and bound to every log line of its request: kept only
# when it is 1–128 characters of letters, digits and ``. _ : -`` (a UUID, a trace id, a ``req_``
# id), else replaced by a new ``req_`` id (docs/security.md).
_CLIENT_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id(client_value: str | None) -> str:
    """The request's id: the client's ``X-Request-Id`` when well-formed, else a new one."""
    if client_value is not None and _CLIENT_REQUEST_ID_RE.match(client_value):
        return client_value
    return new_id("req")

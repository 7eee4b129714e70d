"""Parsing a request body, strictly, for every entry point: valid UTF-8 JSON, no duplicate
object keys (which value would be "as sent"?), no unpaired surrogates (they cannot be stored as
UTF-8), no NaN/Infinity, no nesting deeper than ``MAX_DEPTH`` (a stored document must stay within
the store's nesting limit — MongoDB's is 100 levels — and a 10 000-deep body must not exhaust
the parser's recursion). Errors are values (400 invalid_request)."""

from __future__ import annotations

import json
import re
from typing import Any

from shared.domain.errors import ApiError, invalid, join_path

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
MAX_DEPTH = 32  # arrays/objects inside each other, the body itself being level 1


class _Dup(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Dup(k)
        out[k] = v
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every request (json.loads with hooks builds a new one per call).
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constants)


def bad_unicode_path(value: Any, path: str = "") -> str | None:
    """The JSON path of the first string (or key) holding an unpaired surrogate."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, list):
        for i, v in enumerate(value):
            p = bad_unicode_path(v, join_path(path, i))
            if p is not None:
                return p
    if isinstance(value, dict):
        for k, v in value.items():
            sub = join_path(path, k) if isinstance(k, str) else path
            if bad_unicode_path(k, sub) is not None:
                return sub
            p = bad_unicode_path(v, sub)
            if p is not None:
                return p
    return None


def parse_json(raw: bytes) -> Any | ApiError:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return invalid("the body is not valid UTF-8", None)
    try:
        value = _DECODER.decode(text)
    except _Dup as exc:
        return invalid(f"duplicate key {exc.args[0]!r} in a JSON object", None)
    except ValueError as exc:
        return invalid(f"malformed JSON: {exc}", None)
    except RecursionError:
        return too_deep()
    if depth(value) > MAX_DEPTH:
        return too_deep()
    # Valid UTF-8 cannot encode a surrogate, so one can only come from a \uD800–\uDFFF escape:
    # walk the value only when the text has one.
    p = bad_unicode_path(value) if _SURROGATE_ESCAPE.search(text) else None
    if p is not None:
        return invalid("text must be valid Unicode (unpaired surrogate)", p or None)
    return value


def too_deep() -> ApiError:
    return invalid(f"JSON nesting deeper than {MAX_DEPTH} levels", None)


def depth(value: Any) -> int:
    """How deep arrays and objects nest (0 for a scalar), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, list):
            children = v
        else:
            continue
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break  # already too deep: no need to look further
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list)))
    return deepest

"""Parsing a request body, strictly, for every entry point: valid UTF-8 JSON, no duplicate
object keys (which value would be "as sent"?), no unpaired surrogates (they cannot be stored as
UTF-8), no NaN/Infinity nor a number that overflows to it (``1e999``), and a body nested so
deeply that the parser runs out of recursion (10 000 levels) is a 400 like any malformed body,
never a crash. How deep a *valid* body may nest is the content model's rule
(``validation.values.MAX_JSON_DEPTH``). Errors are values (400 invalid_request)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from shared.domain.errors import ApiError, invalid, join_path

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


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


def _finite(text: str) -> float:
    """A JSON number that overflows a double (``1e999``) would be stored and sent on as
    Infinity, which JSON cannot carry: refused like the constant."""
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text} is out of range (it overflows to infinity)")
    return value


# One decoder for every request (json.loads with hooks builds a new one per call).
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_no_constants,
                            parse_float=_finite)


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
            # a key that is itself the bad string is named escaped (``\udfff``): the param
            # must be encodable, or the 400 could not be rendered (it was a 500)
            sub = join_path(path, printable(k)) if isinstance(k, str) else path
            if bad_unicode_path(k, sub) is not None:
                return sub
            p = bad_unicode_path(v, sub)
            if p is not None:
                return p
    return None


def printable(text: str) -> str:
    """``text`` with each unpaired surrogate as its ``\\uXXXX`` escape (UTF-8 encodable)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


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
    except RecursionError:  # a 10 000-deep body is the client's error, not a 500
        return invalid("request is nested too deeply", None)
    # Valid UTF-8 cannot encode a surrogate, so one can only come from a \uD800–\uDFFF escape:
    # walk the value only when the text has one.
    p = bad_unicode_path(value) if _SURROGATE_ESCAPE.search(text) else None
    if p is not None:
        return invalid("text must be valid Unicode (unpaired surrogate)", p or None)
    return value


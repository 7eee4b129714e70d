"""Checks of plain JSON values, shared by the envelope fields and the content walk: what a
type is called in an error message, strings that UTF-8 cannot carry, and the deep copy of
free-form JSON (metadata) with the limits the store needs."""

from __future__ import annotations

import math
import re
from typing import Any

from shared.domain.errors import ApiError, invalid, join_path

SURROGATE = re.compile("[\ud800-\udfff]")
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_SURROGATE_MESSAGE = "string contains an unpaired UTF-16 surrogate"
MAX_JSON_DEPTH = 32  # nesting inside metadata (the store allows 100 levels for a whole document)


def type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def check_string(value: str, param: str) -> ApiError | None:
    """Text must be encodable as UTF-8: a JSON ``\\ud800`` escape parses into a lone surrogate
    that no store or Kafka record can carry."""
    if not value.isascii() and SURROGATE.search(value):
        return invalid(_SURROGATE_MESSAGE, param)
    return None


class _Bad:
    """A value ``copy_json`` refuses, and the keys from it up to the top (innermost first): the
    path is joined only for an error."""

    __slots__ = ("keys", "message")

    def __init__(self, message: str, key: str | int | None = None) -> None:
        self.message = message
        self.keys: list[str | int] = [] if key is None else [key]


def copy_json(value: object, param: str) -> Any:
    """A deep copy of a JSON value (key order kept), or an ApiError naming the first value that
    is not plain, storable JSON: non-string keys, lone surrogates, non-finite numbers, integers
    outside int64, nesting deeper than ``MAX_JSON_DEPTH``, or non-JSON Python objects."""
    copied = _copy(value, 0)
    if not isinstance(copied, _Bad):
        return copied
    for key in reversed(copied.keys):
        param = join_path(param, key)
    return invalid(copied.message, param)


def _copy(value: object, depth: int) -> Any:
    if depth > MAX_JSON_DEPTH:
        return _Bad(f"nested deeper than {MAX_JSON_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if not value.isascii() and SURROGATE.search(value):
            return _Bad(_SURROGATE_MESSAGE)
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return _Bad("integer outside the 64-bit range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return _Bad("number must be finite")
        return value
    if isinstance(value, list):
        out_list: list[Any] = []
        for i, item in enumerate(value):
            c = _copy(item, depth + 1)
            if isinstance(c, _Bad):
                c.keys.append(i)
                return c
            out_list.append(c)
        return out_list
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                return _Bad("object keys must be strings")
            if not k.isascii() and SURROGATE.search(k):
                return _Bad(_SURROGATE_MESSAGE, k)
            c = _copy(v, depth + 1)
            if isinstance(c, _Bad):
                c.keys.append(k)
                return c
            out[k] = c
        return out
    return _Bad(f"not a JSON value ({type(value).__name__})")

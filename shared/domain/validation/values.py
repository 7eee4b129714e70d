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
        return invalid("string contains an unpaired UTF-16 surrogate", param)
    return None


def copy_json(value: object, param: str, depth: int = 0) -> Any:
    """A deep copy of a JSON value (key order kept), or an ApiError naming the first value that
    is not plain, storable JSON: non-string keys, lone surrogates, non-finite numbers, integers
    outside int64, nesting deeper than ``MAX_JSON_DEPTH``, or non-JSON Python objects."""
    if depth > MAX_JSON_DEPTH:
        return invalid(f"nested deeper than {MAX_JSON_DEPTH} levels", param)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return check_string(value, param) or value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return invalid("integer outside the 64-bit range", param)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return invalid("number must be finite", param)
        return value
    if isinstance(value, list):
        out_list: list[Any] = []
        for i, item in enumerate(value):
            c = copy_json(item, join_path(param, i), depth + 1)
            if isinstance(c, ApiError):
                return c
            out_list.append(c)
        return out_list
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                return invalid("object keys must be strings", param)
            kp = join_path(param, k)
            err = check_string(k, kp)
            if err is not None:
                return err
            c = copy_json(v, kp, depth + 1)
            if isinstance(c, ApiError):
                return c
            out[k] = c
        return out
    return invalid(f"not a JSON value ({type(value).__name__})", param)

"""Errors as values, built in one place, so HTTP and Kafka answers agree (CONTRACT §1 Errors)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ErrorType = Literal[
    "invalid_request",
    "unauthorized",
    "unsupported_or_invalid_configuration",
    "not_found",
    "conflict",
    "request_too_large",
    "rate_limited",
    "timeout",
    "internal_error",
    "unavailable",
]

STATUS: dict[str, int] = {
    "invalid_request": 400,
    "unauthorized": 401,
    "unsupported_or_invalid_configuration": 400,
    "not_found": 404,
    "conflict": 409,
    "request_too_large": 413,
    "rate_limited": 429,
    "internal_error": 500,
    "timeout": 504,
    "unavailable": 503,
}


@dataclass(frozen=True)
class ApiError:
    type: ErrorType
    message: str
    param: str | None = None

    @property
    def status(self) -> int:
        return STATUS[self.type]

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, "param": self.param}}


def invalid(message: str, param: str | None) -> ApiError:
    return ApiError("invalid_request", message, param)


def unsupported(message: str, param: str | None) -> ApiError:
    return ApiError("unsupported_or_invalid_configuration", message, param)


def not_found(message: str, param: str | None = None) -> ApiError:
    return ApiError("not_found", message, param)


def conflict(message: str, param: str | None = None) -> ApiError:
    return ApiError("conflict", message, param)


def too_large(message: str, param: str | None = None) -> ApiError:
    return ApiError("request_too_large", message, param)


def unavailable(message: str) -> ApiError:
    """503: a dependency (the store, the broker) is away, so the answer cannot be guaranteed;
    nothing was written, and a retry with the same idempotency id is safe."""
    return ApiError("unavailable", message, None)


def join_path(base: str, key: str | int) -> str:
    """``join_path("input", 1)`` → ``input[1]``; ``join_path("input[1]", "content")`` →
    ``input[1].content``."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key

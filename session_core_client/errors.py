"""The client's errors. ``ApiError`` is an error answer of the API, one subclass per status the
API gives (``NotFoundError`` for 404 …), each with the answer's ``status``, ``type``,
``message``, JSON ``param`` path, its ``headers`` and ``request_id`` (``x-request-id``, the id
the server's logs carry). ``TransportError`` is an API that could not be reached within the
retry budget; ``ApiTimeoutError`` the same when the last attempt timed out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx


class ApiError(Exception):
    """An error answer of the API: ``{"error": {"type", "message", "param"}}``."""

    def __init__(self, status: int, type_: str, message: str, param: str | None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(f"{status} {type_}: {message}" + (f" (param {param})" if param else ""))
        self.status = status
        self.type = type_
        self.message = message
        self.param = param
        self.headers = httpx.Headers(headers or {})
        self.request_id: str | None = self.headers.get("x-request-id")

    @classmethod
    def from_body(cls, status: int, body: Any, headers: Mapping[str, str] | None = None
                  ) -> ApiError:
        """The error of ``status`` (its subclass), whatever the body looks like."""
        err = body.get("error") if isinstance(body, dict) else None
        if not isinstance(err, dict):
            err = {"message": str(body)[:200]}
        param = err.get("param")
        return error_class(status)(status, str(err.get("type", "http_error")),
                                   str(err.get("message", "")),
                                   None if param is None else str(param), headers)

    @classmethod
    def from_response(cls, resp: httpx.Response) -> ApiError:
        try:
            body: Any = resp.json()
        except ValueError:
            body = resp.text
        return cls.from_body(resp.status_code, body, resp.headers)

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status,
                "error": {"type": self.type, "message": self.message, "param": self.param}}


class BadRequestError(ApiError):
    """400: the request breaks a rule; ``param`` names the field."""


class AuthenticationError(ApiError):
    """401: no API key, or one the server does not know."""


class PermissionDeniedError(ApiError):
    """403."""


class NotFoundError(ApiError):
    """404: no such Session (or not the key's tenant's), call or route."""


class ConflictError(ApiError):
    """409: an idempotency id reused with another body, or a call already answered."""


class RequestTooLargeError(ApiError):
    """413: the body is larger than the API takes."""


class UnprocessableEntityError(ApiError):
    """422."""


class RateLimitError(ApiError):
    """429: too many requests or waits in flight; retried after ``Retry-After``."""


class InternalServerError(ApiError):
    """5xx."""


class ServiceUnavailableError(InternalServerError):
    """503: the store or the broker is unreachable; nothing was written; retried."""


class GatewayTimeoutError(InternalServerError):
    """504: storage did not answer in time; the input is in Kafka and will be stored; retried
    with the same idempotency id."""


STATUS_ERRORS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    413: RequestTooLargeError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: ServiceUnavailableError,
    504: GatewayTimeoutError,
}


def error_class(status: int) -> type[ApiError]:
    return STATUS_ERRORS.get(status) or (InternalServerError if status >= 500 else ApiError)


class TransportError(Exception):
    """The API could not be reached (or kept failing) within the retry budget."""


class ApiTimeoutError(TransportError):
    """The last attempt timed out: no answer within the call's read timeout."""

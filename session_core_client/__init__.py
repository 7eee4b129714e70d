"""``session_core_client``: a small client for Session Core's public HTTP API (httpx only).

* ``Client`` (sync) and ``AsyncClient`` (asyncio): create a Session, send a message, submit a
  function result, read the Session, its Items and a call, wait for a Turn, follow the Items as
  Server-Sent Events with resume.
* Idempotency ids (``client_request_id`` / ``client_event_id``) are minted by the client when the
  caller gives none, so a retry of the same call can never double-post; 429 / 503 / 504 answers,
  connection errors and timeouts are retried with the same id, sleeping ``Retry-After`` or a
  jittered exponential backoff.
* Timeouts: every call has a read timeout (``timeout_s`` of the client, or of one call); a wait
  (``wait=True``) its ``timeout_ms`` plus a margin, retries included. ``stream_items`` stops
  after ``idle_timeout_s`` without an Item, whatever keep-alives flow.
* ``content``: builders for messages and parts (text, PNG/JPEG images as data URIs).
* ``cli``: the user CLI, ``session-core-cli``.

Errors (``errors``): ``ApiError`` is an error answer (``status``, ``type``, ``message``,
``param``, ``headers``, ``request_id``), raised as its subclass for the status
(``BadRequestError``, ``NotFoundError``, ``RateLimitError``, ``GatewayTimeoutError`` …);
``TransportError`` means the API could not be reached within the retry budget,
``ApiTimeoutError`` that its last attempt timed out.
"""

from session_core_client.aio import AsyncClient
from session_core_client.client import Client
from session_core_client.content import image_part, message, text_part
from session_core_client.core import RetryPolicy
from session_core_client.errors import (
    ApiError,
    ApiTimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    GatewayTimeoutError,
    InternalServerError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    ServiceUnavailableError,
    TransportError,
    UnprocessableEntityError,
)

__all__ = [
    "ApiError",
    "ApiTimeoutError",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "GatewayTimeoutError",
    "InternalServerError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "RequestTooLargeError",
    "RetryPolicy",
    "ServiceUnavailableError",
    "TransportError",
    "UnprocessableEntityError",
    "image_part",
    "message",
    "text_part",
]
__version__ = "0.1.0"

"""``session_core_client``: a small client for Session Core's public HTTP API (httpx only).

* ``Client`` (sync) and ``AsyncClient`` (asyncio): create a Session, send a message, submit a
  function result, read the Session, its Items and a call, wait for a Turn, follow the Items as
  Server-Sent Events with resume.
* Idempotency ids (``client_request_id`` / ``client_event_id``) are minted by the client when the
  caller gives none, so a retry of the same call can never double-post; 429 / 503 answers and
  connection errors are retried with ``Retry-After`` and exponential backoff.
* ``content``: builders for messages and parts (text, PNG/JPEG images as data URIs).

Errors are ``ApiError`` (an error answer: ``status``, ``type``, ``message``, ``param``) or
``TransportError`` (the API could not be reached within the retry budget).
"""

from session_core_client.aio import AsyncClient
from session_core_client.client import Client
from session_core_client.content import image_part, message, text_part
from session_core_client.core import ApiError, RetryPolicy, TransportError

__all__ = [
    "ApiError",
    "AsyncClient",
    "Client",
    "RetryPolicy",
    "TransportError",
    "image_part",
    "message",
    "text_part",
]
__version__ = "0.1.0"

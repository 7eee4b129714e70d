"""Tenants and API keys, pure (docs/security.md).

``Settings.api_keys`` is a comma-separated list of ``tenant:sha256hex`` entries: the hex SHA-256
of a bearer key and the tenant it belongs to. Core never holds a key in plain text; it hashes
the presented bearer key and compares digests with ``hmac.compare_digest``. A tenant may have
several keys (rotation); a digest belongs to one tenant only."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

DEFAULT_TENANT = "default"  # with auth disabled, and for session.input records without one
TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def is_tenant(value: object) -> bool:
    return isinstance(value, str) and TENANT_RE.fullmatch(value) is not None


def key_digest(key: str) -> str:
    """The hex SHA-256 of a bearer key, as ``api_keys`` stores it."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    """A fresh bearer key: 32 random bytes, URL-safe."""
    return "sck_" + secrets.token_urlsafe(32)


def key_entry(tenant: str, key: str) -> str:
    """The ``api_keys`` entry for ``key`` of ``tenant``."""
    if not is_tenant(tenant):
        raise ValueError(f"invalid tenant name {tenant!r}: {TENANT_RE.pattern}")
    if not key:
        raise ValueError("an API key must not be empty")
    return f"{tenant}:{key_digest(key)}"


@dataclass(frozen=True)
class ApiKeys:
    """The parsed ``api_keys`` setting: (digest, tenant) pairs."""

    entries: tuple[tuple[bytes, str], ...]

    @classmethod
    def parse(cls, raw: str) -> ApiKeys:
        """Parse ``tenant:sha256hex[,…]``; a malformed entry is a configuration error (the
        service refuses to start rather than silently refusing or admitting keys)."""
        entries: list[tuple[bytes, str]] = []
        owners: dict[bytes, str] = {}
        for n, part in enumerate(raw.split(",")):
            part = part.strip()
            if not part:
                continue
            tenant, sep, digest = part.partition(":")
            digest = digest.strip().lower()
            if not sep or not is_tenant(tenant.strip()) or not _HEX64.fullmatch(digest):
                raise ValueError(
                    f"api_keys entry {n + 1} is not 'tenant:sha256hex' (tenant "
                    f"{TENANT_RE.pattern}, 64 hex digits); make one with "
                    "'session-core hash-key <tenant>'")
            d = bytes.fromhex(digest)
            tenant = tenant.strip()
            if owners.setdefault(d, tenant) != tenant:
                raise ValueError(f"api_keys entry {n + 1}: this key already belongs to tenant "
                                 f"{owners[d]!r}")
            entries.append((d, tenant))
        return cls(tuple(entries))

    def tenant_of(self, key: str) -> str | None:
        """The tenant of a presented bearer key, or None. Every entry is compared (no early
        exit), each with a constant-time digest comparison."""
        presented = hashlib.sha256(key.encode("utf-8")).digest()
        found: str | None = None
        for digest, tenant in self.entries:
            if hmac.compare_digest(digest, presented):
                found = tenant
        return found


def bearer(authorization: str) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header, or None."""
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        return None
    return key


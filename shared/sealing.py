"""Sealed deliveries: a delivery's content readable only by the Runtime it is addressed to
(and by Core's receipt tracker), although every Runtime principal may read
``runtime.deliveries`` (docs/security.md, "Sealed deliveries").

A Runtime that wants its deliveries sealed generates an X25519 key pair at start and reports the
public key in its registration (``capabilities.sealed_deliveries``). The dispatcher then moves
the delivery's content fields (``messages`` of a start or steer, ``content`` of a function
result) into ``sealed``:

* a fresh content key encrypts the JSON of those fields (ChaCha20-Poly1305, a random nonce),
  with the delivery's envelope (schema, delivery, Runtime, Session, Turn, kind, call) as
  associated data: a sealed body moved to another delivery does not open;
* the content key is wrapped once per recipient — the Runtime's key and Core's
  (``SESSION_CORE_SEAL_KEY``, which the dispatcher and the receipt tracker hold: the tracker
  matches a result's content against the harness's receipt) — each with an ephemeral X25519
  key agreement and HKDF-SHA256.

What stays in clear is what Core routes by and the tracker times by: ids, ``kind``, ``call_id``,
``name``, ``success``, ``reason``. Pure functions; keys are raw 32-byte X25519 keys in unpadded
base64url."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.messages.schemas import SEALING_ALG

ALG = SEALING_ALG
SEALED_FIELDS = ("messages", "content")  # what a delivery carries of the tenant's input
ENVELOPE_FIELDS = ("schema", "delivery_id", "runtime_id", "session_id", "turn_id", "kind",
                   "call_id")
_INFO = b"session-core sealed delivery v1"
_RAW = serialization.Encoding.Raw


class SealError(ValueError):
    """A sealed body that cannot be opened with this key (not addressed to it, altered, or
    malformed)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: Any, what: str, size: int | None = None) -> bytes:
    if not isinstance(text, str):
        raise SealError(f"{what}: not a string")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise SealError(f"{what}: not base64url") from exc
    if size is not None and len(data) != size:
        raise SealError(f"{what}: {len(data)} bytes, not {size}")
    return data


@dataclass(frozen=True)
class KeyPair:
    private: X25519PrivateKey

    @classmethod
    def generate(cls) -> KeyPair:
        return cls(X25519PrivateKey.generate())

    @classmethod
    def from_private(cls, text: str) -> KeyPair:
        """The key pair of a private key in unpadded base64url (a setting's value)."""
        return cls(X25519PrivateKey.from_private_bytes(_unb64(text, "private key", 32)))

    @property
    def public(self) -> str:
        return _b64(self.private.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw))

    @property
    def private_text(self) -> str:
        return _b64(self.private.private_bytes(_RAW, serialization.PrivateFormat.Raw,
                                               serialization.NoEncryption()))


def key_id(public: str) -> str:
    """A public key's short name (which wrapped key is whose)."""
    return hashlib.sha256(_unb64(public, "public key", 32)).hexdigest()[:16]


def check_public(public: Any) -> str:
    """``public`` if it is a 32-byte X25519 public key in unpadded base64url, else
    ``SealError`` (a registration that reports a key Core cannot seal to)."""
    _unb64(public, "sealed_deliveries.key", 32)
    return str(public)


def _kek(shared: bytes, epk: bytes, recipient: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=_INFO + epk + recipient).derive(shared)


def _aad(delivery: Mapping[str, Any]) -> bytes:
    return json.dumps([delivery.get(k) for k in ENVELOPE_FIELDS],
                      separators=(",", ":")).encode()


def seal(delivery: Mapping[str, Any], recipients: list[str]) -> dict[str, Any]:
    """``delivery`` with its ``SEALED_FIELDS`` moved into ``sealed``, readable by each of the
    ``recipients`` (public keys); one without any (an interrupt) as it is."""
    body = {k: delivery[k] for k in SEALED_FIELDS if k in delivery}
    if not body:
        return dict(delivery)
    cek, nonce = ChaCha20Poly1305.generate_key(), os.urandom(12)
    ct = ChaCha20Poly1305(cek).encrypt(nonce, json.dumps(body, separators=(",", ":"),
                                                         ensure_ascii=False).encode(),
                                       _aad(delivery))
    to = []
    for public in recipients:
        raw = _unb64(public, "public key", 32)
        eph = X25519PrivateKey.generate()
        epk = eph.public_key().public_bytes(_RAW, serialization.PublicFormat.Raw)
        kek = _kek(eph.exchange(X25519PublicKey.from_public_bytes(raw)), epk, raw)
        to.append({"kid": key_id(public), "epk": _b64(epk),
                   "key": _b64(ChaCha20Poly1305(kek).encrypt(bytes(12), cek, None))})
    out = {k: v for k, v in delivery.items() if k not in SEALED_FIELDS}
    out["sealed"] = {"alg": ALG, "nonce": _b64(nonce), "ciphertext": _b64(ct), "to": to}
    return out


def is_sealed(delivery: Mapping[str, Any]) -> bool:
    return "sealed" in delivery


def unseal(delivery: Mapping[str, Any], keys: KeyPair) -> dict[str, Any]:
    """The delivery as it was before ``seal``, opened with ``keys``; ``SealError`` when it is
    not addressed to them, was altered, or is malformed."""
    sealed = delivery.get("sealed")
    if not isinstance(sealed, dict) or sealed.get("alg") != ALG:
        raise SealError(f"sealed: not a {ALG} body")
    kid = key_id(keys.public)
    mine = [r for r in sealed.get("to") or () if isinstance(r, dict) and r.get("kid") == kid]
    if not mine:
        raise SealError("sealed: not addressed to this key")
    epk = _unb64(mine[0].get("epk"), "sealed.to.epk", 32)
    own = _unb64(keys.public, "public key", 32)
    try:
        kek = _kek(keys.private.exchange(X25519PublicKey.from_public_bytes(epk)), epk, own)
        cek = ChaCha20Poly1305(kek).decrypt(bytes(12), _unb64(mine[0].get("key"),
                                                               "sealed.to.key"), None)
        plain = ChaCha20Poly1305(cek).decrypt(_unb64(sealed.get("nonce"), "sealed.nonce", 12),
                                              _unb64(sealed.get("ciphertext"),
                                                     "sealed.ciphertext"), _aad(delivery))
    except (InvalidTag, ValueError) as exc:
        raise SealError(f"sealed: does not open ({type(exc).__name__})") from exc
    body = json.loads(plain)
    if not isinstance(body, dict) or set(body) - set(SEALED_FIELDS):
        raise SealError("sealed: unexpected fields inside")
    out = {k: v for k, v in delivery.items() if k != "sealed"}
    out.update(body)
    return out


__all__ = ["ALG", "KeyPair", "SealError", "check_public", "is_sealed", "key_id", "seal",
           "unseal"]

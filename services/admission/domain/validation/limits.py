"""The sizes admission enforces, read by every step of the pass (envelope, content, profile)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.settings import Settings


@dataclass(frozen=True, slots=True)
class Limits:
    max_body_bytes: int = 16 * 1024 * 1024  # shared.settings.STORE_DOCUMENT_BYTES
    max_image_bytes: int = 5 * 1024 * 1024
    max_image_pixels: int = 40_000_000
    max_images_per_request: int = 20
    max_parts_per_message: int = 1_000
    max_messages_per_request: int = 100
    max_id_length: int = 255  # client_request_id, client_event_id, call_id
    # metadata, tags and external_actor (docs/admission.md "Metadata, tags, external actor")
    max_metadata_bytes: int = 16 * 1024  # compact JSON, UTF-8 (each metadata object)
    max_metadata_keys: int = 64  # top-level keys of each metadata object
    max_tags: int = 20
    max_tag_length: int = 64  # characters
    max_actor_field_length: int = 255  # source, actor_id, actor_name (characters)
    # memory an image's full decode may take, checked from its header (``DecodeBudget``):
    # derived from the replica's memory limit (``decode_budgets``)
    max_decode_bytes_per_image: int = 128 * 1024 * 1024
    max_decode_bytes_per_request: int = 512 * 1024 * 1024

    @classmethod
    def from_settings(cls, s: Settings) -> Limits:
        per_image, per_request = decode_budgets(s.memory_limit_bytes)
        return cls(**{name: getattr(s, name) for name in _SETTINGS},
                   max_decode_bytes_per_image=per_image,
                   max_decode_bytes_per_request=per_request)


# Admission decodes images on ``IMAGE_DECODE_WORKERS`` threads, one image at a time each, so
# at most that many decodes are in memory at once on a replica: together half its memory limit
# (the rest for the process, request bodies, the Item tail). A request's images together may
# take the whole limit's worth, one after another (a bound on one request's decode time).
IMAGE_DECODE_WORKERS = 2


def decode_budgets(memory_limit_bytes: int) -> tuple[int, int]:
    """(per image, per request) decode bytes for a replica with this memory limit; at 512 MiB
    (the chart's admission limit): 128 MiB and 512 MiB (256 MiB decoding at once)."""
    per_image = memory_limit_bytes // 2 // IMAGE_DECODE_WORKERS
    return per_image, memory_limit_bytes


# the limits an operator sets (shared.settings); the others are fixed by the contract
_SETTINGS = (
    "max_body_bytes",
    "max_image_bytes",
    "max_image_pixels",
    "max_images_per_request",
    "max_parts_per_message",
    "max_messages_per_request",
)

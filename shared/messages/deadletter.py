"""``dlq.record/1``: what every ``<topic>.dlq`` carries (``shared.kafka.dlq_envelope`` builds
it; docs/reliability.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from shared.messages import schemas
from shared.messages.fields import OPEN, Timestamp


class DeadLetter(BaseModel):
    """A record that left ``source_topic`` unprocessed (``shared.kafka.dlq_envelope`` writes it;
    docs/reliability.md). Keyed by the original record's key."""

    model_config = OPEN
    schema_: schemas.DeadLetterSchema = Field(alias="schema")
    source_topic: str = Field(description="the topic the record was read from")
    partition: int | None = Field(description="the partition it was read from")
    offset: int | None = Field(description="its offset there")
    reason: Literal["undecodable", "missing_schema", "unexpected_schema", "invalid_fields",
                    "unprocessable", "too_large", "not_bound_runtime",
                    "wrong_tenant", "unsealable"] = Field(
        description="the reason code (shared/domain/poison.py; the label of "
                    "session_core_dlq_records_total)")
    detail: str = Field(description="the reason in words (up to 300 characters)")
    failed_at: Timestamp
    key: str | None = Field(description="the original key as UTF-8 text (lossy); null when "
                                        "the record had none or it is too large to repeat")
    key_b64: str | None = Field(description="the original key's bytes, base64")
    value_b64: str = Field(description="the original value's bytes, base64 — all of them "
                                       "unless value_truncated")
    value: str | None = Field(None, description="the original value as UTF-8 text (lossy), "
                                                "for reading; absent when the value is over "
                                                "1 MiB or would not fit the DLQ record")
    value_truncated: bool | None = Field(None, description="true when value_b64 holds only "
                                                           "the first bytes of the value (the "
                                                           "whole would not fit the DLQ topic)")
    value_bytes: int | None = Field(None, description="with value_truncated: the original "
                                                      "value's length")
    value_sha256: str | None = Field(None, description="with value_truncated: the original "
                                                       "value's SHA-256, hex")

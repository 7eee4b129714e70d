"""``docs/schemas/dlq.json`` describes every field ``shared.kafka.dlq_envelope`` writes (issue
59): each envelope — with and without a key, truncated to fit its topic, too large to repeat as
text, for every reason code — validates against the published schema made strict (no field it
does not name), and the schema's reason codes are exactly the codes a ``Poison`` can carry."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from shared.domain import poison
from shared.domain.poison import Poison
from shared.kafka import DLQ_ROOM, DLQ_TEXT_MAX, dlq_envelope
from shared.messages import deadletter

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas" / "dlq.json")
                    .read_text())
STRICT = Draft202012Validator({**SCHEMA, "additionalProperties": False})
CODES = {v for k, v in vars(poison).items() if k.isupper() and isinstance(v, str)}


def test_the_reason_codes_are_the_poison_codes() -> None:
    reason = deadletter.DeadLetter.model_fields["reason"].annotation
    assert set(typing.get_args(reason)) == CODES
    assert set(SCHEMA["properties"]["reason"]["enum"]) == CODES


@pytest.mark.parametrize(("raw", "key", "max_bytes"), [
    (b'{"schema": "x/1"}', b"session_1", 0),
    (b"\xff\xfe not utf-8", None, 0),
    (b"x" * (DLQ_TEXT_MAX + 1), b"k", 0),  # too long to repeat as text
    (b"y" * 200_000, b"k" * 10, DLQ_ROOM + 100_000),  # truncated to fit its topic
    (b"{}", b"k" * 100_000, DLQ_ROOM + 1_000),  # a key too large to repeat
])
@pytest.mark.parametrize("code", sorted(CODES))
def test_every_envelope_validates_against_the_published_schema(
        raw: bytes, key: bytes | None, max_bytes: int, code: str) -> None:
    envelope: dict[str, Any] = dlq_envelope("session.input", raw, Poison(code, "why"),
                                            key=key, partition=3, offset=42,
                                            max_bytes=max_bytes)
    errors = [f"{e.json_path}: {e.message}" for e in STRICT.iter_errors(envelope)]
    assert not errors, errors


def test_the_cases_above_reach_every_optional_field() -> None:
    truncated = dlq_envelope("t", b"y" * 200_000, Poison("too_large", "big"), key=b"k",
                             partition=0, offset=0, max_bytes=DLQ_ROOM + 100_000)
    assert truncated["value_truncated"] and truncated["value_bytes"] == 200_000
    assert truncated["value_sha256"] and "value" not in truncated  # no room for the text
    assert "value" not in dlq_envelope("t", b"x" * (DLQ_TEXT_MAX + 1), Poison("too_large", "b"),
                                       key=None, partition=None, offset=None)
    assert set(SCHEMA["properties"]) == set(truncated) | {"value"}

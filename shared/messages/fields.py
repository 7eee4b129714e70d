"""What the record models of ``shared.messages`` share: how a consumer reads a record (strict
JSON types, unknown fields kept) and the field types several records use."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field

from shared.records import parse_time

# How every consumer reads a record: strict JSON types (``"1"`` is not an integer, ``true`` is
# not a number) and every field the model does not declare kept as it came (``model_extra``), so
# a record from a newer producer still decodes. Free-form values (content arguments, native
# records, submissions) are typed ``Any`` or as the content model: pydantic hands the decoded
# JSON through, and ``Decoded.value`` is the record exactly as decoded.
READ = ConfigDict(strict=True, extra="allow", populate_by_name=True)
# The same for a record whose every producer is Core (the Items): read like any other, while
# the published schema lists exactly what Core writes (``additionalProperties: false``, which
# the OpenAPI checks of the HTTP answers hold Core to).
CLOSED = ConfigDict(strict=True, extra="allow", populate_by_name=True,
                    json_schema_extra={"additionalProperties": False})
# Records Core only publishes and never reads back (session.input is read by admission's own
# validator; the answers, the DLQ envelope).
EXACT = ConfigDict(extra="forbid")
OPEN = ConfigDict(extra="allow")

SessionId = Annotated[str, Field(pattern=r"^session_[0-9a-f]{32}$")]
RuntimeId = Annotated[str, Field(min_length=1)]
Timestamp = Annotated[str, Field(description="RFC 3339")]


def _rfc3339(value: str) -> str:
    parse_time(value)  # ValueError: not RFC 3339 with a time zone
    return value


# A timestamp a consumer computes with (a registration's heartbeat): checked when decoded.
CheckedTimestamp = Annotated[Timestamp, AfterValidator(_rfc3339)]

"""Settings that the spec fixes rather than leaves to tuning.

"Both adapters wait at most 10 seconds for a receipt" (primary spec, "Function results"): the
receipt window is the spec's, not a tuning knob. ``SESSION_CORE_RECEIPT_WINDOW_S`` is accepted
only in (0, 10] seconds; tests may shorten it (``model_copy`` or a value below 10), nothing may
lengthen it or switch it off. The Helm chart's values schema carries the same bounds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from shared.settings import Settings

ENV = "SESSION_CORE_RECEIPT_WINDOW_S"
CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "session-core"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())

WINDOW_TABLE: list[tuple[str, float | None]] = [
    # (environment value, the window accepted — None: refused)
    ("10", 10.0),
    ("10.0", 10.0),
    ("9.999", 9.999),
    ("1.5", 1.5),
    ("0.05", 0.05),
    ("10.001", None),
    ("11", None),
    ("60", None),
    ("0", None),
    ("-0.0", None),
    ("-1", None),
    ("nan", None),
    ("inf", None),
    ("-inf", None),
    ("ten", None),
    ("", None),
]


@pytest.mark.parametrize(("raw", "want"), WINDOW_TABLE)
def test_receipt_window_is_at_most_10s_and_above_0(
    monkeypatch: pytest.MonkeyPatch, raw: str, want: float | None
) -> None:
    monkeypatch.setenv(ENV, raw)
    if want is None:
        with pytest.raises(ValidationError) as info:
            Settings()
        assert "receipt_window_s" in str(info.value)
    else:
        assert Settings().receipt_window_s == want


def test_receipt_window_default_is_the_specs_10s() -> None:
    assert Settings.model_fields["receipt_window_s"].default == 10.0


def test_chart_schema_carries_the_same_bounds() -> None:
    node = SCHEMA["properties"]["config"]["properties"][ENV]
    assert node["type"] == "number"
    assert node.get("exclusiveMinimum") == 0 and "minimum" not in node
    assert node.get("maximum") == 10 and "exclusiveMaximum" not in node

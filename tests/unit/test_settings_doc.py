"""docs/settings.md is generated from shared/settings.py and documents every setting."""

from __future__ import annotations

from shared.settings import Settings
from shared.settingsdoc import DOC, reference


def test_the_settings_page_is_what_the_code_generates() -> None:
    assert DOC.read_text(encoding="utf-8") == reference(), (
        "docs/settings.md drifted: run `python -m shared.settingsdoc`")


def test_every_setting_has_a_row_with_a_meaning() -> None:
    rows = [line for line in reference().splitlines() if line.startswith("| `")]
    assert len(rows) == len(Settings.model_fields)
    undocumented = [r.split("|")[1].strip() for r in rows if r.split("|")[3].strip() == ""]
    assert undocumented == [], "add a comment beside or above these settings"


def test_bounds_come_from_the_model() -> None:
    row = next(line for line in reference().splitlines() if "RECEIPT_WINDOW_S" in line)
    assert "(> 0, ≤ 10.0)" in row

"""``SESSION_CORE_PG_BIN``, when set, is the only place PostgreSQL's programs are taken from: a
wrong setting is an error, never a silent fall back to another installation (so a CI run can be
shown failing without PostgreSQL: tests/support/skips.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.local.stack import StackError
from deploy.local.stack import postgres as pg


def test_the_set_directory_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "initdb").write_text("#!/bin/sh\n")
    monkeypatch.setenv("SESSION_CORE_PG_BIN", str(tmp_path))
    assert pg.pg_bin("initdb") == tmp_path / "initdb"


def test_a_set_directory_without_the_program_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESSION_CORE_PG_BIN", str(tmp_path))
    with pytest.raises(StackError, match="SESSION_CORE_PG_BIN"):
        pg.pg_bin("initdb")
    assert not pg.available()

"""The two distributions agree (docs/client.md, "Installing"): the client distribution
(packaging/client/pyproject.toml) ships every subpackage of ``session_core_client`` and nothing
else, under the same version and with the same dependencies as the server distribution's base
install — which is what requirements/client.lock pins — and both name the user CLI alike."""

from __future__ import annotations

import tomllib
from pathlib import Path

import session_core_client

REPO = Path(__file__).resolve().parents[2]
SERVER = tomllib.loads((REPO / "pyproject.toml").read_text())
CLIENT = tomllib.loads((REPO / "packaging" / "client" / "pyproject.toml").read_text())


def test_the_client_wheel_lists_every_subpackage_of_the_library_and_nothing_else() -> None:
    packages = {".".join(p.parent.relative_to(REPO).parts)
                for p in (REPO / "session_core_client").rglob("__init__.py")}
    assert set(CLIENT["tool"]["setuptools"]["packages"]) == packages
    assert CLIENT["tool"]["setuptools"]["package-dir"] == {
        "session_core_client": "../../session_core_client"}
    assert "py.typed" in CLIENT["tool"]["setuptools"]["package-data"]["session_core_client"]
    assert (REPO / "session_core_client" / "py.typed").exists()


def test_the_client_depends_on_what_the_client_lock_pins() -> None:
    assert CLIENT["project"]["dependencies"] == SERVER["project"]["dependencies"]
    assert CLIENT["project"]["optional-dependencies"]["kafka"] == \
        SERVER["project"]["optional-dependencies"]["kafka-client"]


def test_one_version_and_one_name_for_the_user_cli() -> None:
    assert session_core_client.__version__ == SERVER["project"]["version"]
    assert CLIENT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "session_core_client.__version__"}
    cli = "session_core_client.cli.main:main"
    assert CLIENT["project"]["scripts"] == {"session-core-cli": cli}
    assert SERVER["project"]["scripts"]["session-core-cli"] == cli

"""The three locks (docs/dependencies.md) agree with pyproject.toml: every requirement of each
environment is pinned, at a version its specifier allows, with hashes. Offline; `make lock-check`
re-resolves against the index and diffs (CI), this test catches the common drift (a dependency
added, bumped past its pin, or an extra renamed) without a network."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
NAME = canonicalize_name(PROJECT["name"])
# the lock and the extras it must cover: dev is everything, the client is the base install,
# the image is the services
LOCKS = {
    "requirements/dev.lock": ("dev",),
    "requirements/client.lock": (),
    "deploy/image/requirements.lock": ("server",),
}
# the environment the universal locks are installed in here, and the image's
MARKER_ENV = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
              "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
              "implementation_name": "cpython", "platform_python_implementation": "CPython"}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._\-]*)==(\S+)(?:\s*;\s*(.+?))?\s*\\?$", re.M)


def pins_of(text: str) -> dict[str, Version]:
    """The pins that apply here (a universal lock may pin one name twice, under two markers)."""
    return {canonicalize_name(n): Version(v) for n, v, marker in PIN.findall(text)
            if not marker or Marker(marker).evaluate(MARKER_ENV)}


def requirements_of(extras: tuple[str, ...]) -> list[Requirement]:
    """The project's own requirements for these extras, self-references (`session-core[server]`)
    expanded, markers evaluated for the machine the locks serve."""
    out: list[Requirement] = []
    todo, seen = [("", r) for r in PROJECT["dependencies"]], set()
    for extra in extras:
        todo += [(extra, r) for r in PROJECT["optional-dependencies"][extra]]
    while todo:
        extra, line = todo.pop()
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({**MARKER_ENV, "extra": extra}):
            continue
        if canonicalize_name(req.name) == NAME:
            for sub in sorted(req.extras - seen):
                seen.add(sub)
                todo += [(sub, r) for r in PROJECT["optional-dependencies"][sub]]
            continue
        out.append(req)
    return out


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_requirement_is_pinned_within_its_specifier(lock: str) -> None:
    pins = pins_of((REPO / lock).read_text())
    assert pins, f"{lock} pins nothing"
    for req in requirements_of(LOCKS[lock]):
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is in pyproject.toml but not in {lock}: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"{lock} pins {name}=={pins[name]}, outside pyproject.toml's {req}: run `make lock`")


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_pin_carries_hashes(lock: str) -> None:
    text = (REPO / lock).read_text()
    blocks = [b for b in re.split(r"\n(?=[A-Za-z0-9])", text) if PIN.match(b)]
    assert len(blocks) == len(PIN.findall(text))
    for block in blocks:
        assert "--hash=sha256:" in block, f"{lock}: {block.splitlines()[0]} has no hash"


def test_the_client_lock_holds_no_server_dependency() -> None:
    client = set(pins_of((REPO / "requirements/client.lock").read_text()))
    server_only = {canonicalize_name(r.name) for r in requirements_of(("server",))}
    server_only -= {canonicalize_name(r.name) for r in requirements_of(())}
    assert not client & server_only


def test_the_venv_is_installed_from_the_lock_and_keyed_by_it() -> None:
    """`make install`'s venv comes from requirements/dev.lock with hashes required and no
    dependency resolution of its own; its cache key changes when the lock does."""
    from deploy.local.stack import base, install

    source = Path(install.__file__).read_text()
    assert '"--require-hashes", "--no-deps", "-r", str(DEV_LOCK)' in source
    assert base.DEV_LOCK == REPO / "requirements" / "dev.lock"
    assert base.venv_path().name == f"venv-{base.digest([base.DEV_LOCK])[:12]}"

"""The image built here without Docker (deploy/image/build.sh) and the Dockerfile for people with
Docker have one layout and one configuration, and both install the locked dependencies."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = (REPO / "deploy" / "image" / "build.sh").read_text()
DOCKERFILE = (REPO / "deploy" / "Dockerfile").read_text()
LOCK = (REPO / "deploy" / "image" / "requirements.lock").read_text()


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_dependency_is_pinned_with_hashes() -> None:
    pins = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+) \\$", LOCK, re.M))
    assert pins, "no pins"
    blocks = re.split(r"\n(?=[A-Za-z0-9])", LOCK.split("\n", 4)[-1])
    for block in blocks:
        if "==" in block:
            assert "--hash=sha256:" in block, block.splitlines()[0]
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        name = _norm(re.split(r"[\[<>=!~ ]", dep, maxsplit=1)[0])
        assert name in {_norm(n) for n in pins}, f"{dep} is not in requirements.lock"


def test_both_builds_install_from_the_lock_with_hashes() -> None:
    assert "--require-hashes" in BUILD and "-r /tmp/wheels/requirements.lock" in BUILD
    assert "--no-index" in BUILD
    assert "--require-hashes" in DOCKERFILE and "requirements.lock" in DOCKERFILE
    dockerignore = (REPO / ".dockerignore").read_text().split()
    assert "!deploy/image/requirements.lock" in dockerignore


def test_the_image_configuration_matches_the_dockerfile() -> None:
    final = DOCKERFILE[DOCKERFILE.rindex("\nFROM "):]
    assert 'ENTRYPOINT ["session-core"]' in final and "--entrypoint '[\"session-core\"]'" in BUILD
    assert 'CMD ["admission"]' in final and "--cmd admission" in BUILD
    assert "USER 10001:10001" in final and "--user 10001:10001" in BUILD
    assert "WORKDIR /tmp" in final and "--workingdir /tmp" in BUILD
    assert "EXPOSE 8080 8081" in final and "--port 8080 --port 8081" in BUILD
    for env in ("PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1", "TMPDIR=/tmp",
                "SESSION_CORE_HTTP_PORT=8080", "SESSION_CORE_HEALTH_PORT=8081"):
        assert env in final and f"--env {env}" in BUILD, env
    assert "PATH=/opt/venv/bin:" in final and "--env PATH=/opt/venv/bin:" in BUILD
    assert "--uid 10001" in final and "--uid 10001" in BUILD
    # no pip and no compiler in the image
    assert "pip uninstall --quiet -y pip setuptools" in BUILD
    assert "dpkg --purge python3-venv" in BUILD

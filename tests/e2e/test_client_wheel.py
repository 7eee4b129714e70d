"""The client distribution alone (issue 59): the `session-core-client` wheel built from
packaging/client/pyproject.toml, installed into a fresh venv with only what
requirements/client.lock pins (httpx and its dependencies), nothing of the repository on the
path. In that venv the wheel has no `services` or `shared` package, `session-core-cli --help`
answers, and `create` then `tail --follow --timeout 3` work against the running system — the
tail ending within 4 s of its start. (That keep-alives do not extend it is
tests/unit/test_client_timeouts.py's, with a keep-alive every second.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.processes import Core
from tests.support.public import API_KEY

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]



class ClientVenv:
    def __init__(self, root: Path, wheel: Path) -> None:
        self.root = root
        self.wheel = wheel
        self.bin = root / "venv" / "bin"

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """A command of the venv, from a directory outside the repository, with an environment
        that names nothing of it."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env["PATH"] = f"{self.bin}:{env.get('PATH', '')}"
        return subprocess.run([str(self.bin / args[0]), *args[1:]], cwd=self.root, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout, check=False)


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> ClientVenv:
    root = tmp_path_factory.mktemp("client-wheel")
    # a copy of what the build reads, in the repository's layout, so the build writes nothing
    # into the working tree
    src = root / "src"
    shutil.copytree(REPO / "packaging" / "client", src / "packaging" / "client")
    shutil.copytree(REPO / "session_core_client", src / "session_core_client",
                    ignore=shutil.ignore_patterns("__pycache__"))
    dist = root / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-cache-dir", "-w", str(dist), str(src / "packaging" / "client")],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = dist.glob("session_core_client-*.whl")
    venv.EnvBuilder(with_pip=True).create(root / "venv")
    pip = [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check"]
    subprocess.run([*pip, "--require-hashes", "-r", str(REPO / "requirements/client.lock")],
                   check=True, capture_output=True, timeout=300)
    subprocess.run([*pip, "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    return ClientVenv(root, wheel)


@pytest.mark.slow  # make test-slow: builds and installs the wheel in a fresh venv
def test_the_client_wheel_installs_alone_and_its_cli_answers(client_venv: ClientVenv) -> None:
    names = zipfile.ZipFile(client_venv.wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"session_core_client"}, top
    assert "session_core_client/py.typed" in names
    assert "session_core_client/cli/main.py" in names
    for package in ("services", "shared", "runtimes", "scripted_model", "demo"):
        gone = client_venv.run("python", "-c", f"import {package}")
        assert gone.returncode != 0 and "ModuleNotFoundError" in gone.stderr, gone.stderr
    installed = client_venv.run("python", "-m", "pip", "list", "--format=json")
    names_installed = {p["name"].lower() for p in json.loads(installed.stdout)}
    assert not names_installed & {"structlog", "pydantic", "faststream", "pillow", "pymongo"}
    helped = client_venv.run("session-core-cli", "--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: session-core-cli")
    for sub in ("create", "send", "result", "items", "tail", "call", "session"):
        assert sub in helped.stdout


@pytest.mark.slow  # make test-slow: builds and installs the wheel in a fresh venv
def test_create_and_tail_from_the_client_venv(client_venv: ClientVenv, core: Core) -> None:
    common = ("--api", core.base_url, "--api-key", API_KEY)
    created = client_venv.run("session-core-cli", "create", *common, "--harness", "codex",
                              "--text", "hello from the client wheel", "--json")
    assert created.returncode == 0, created.stderr
    sid = json.loads(created.stdout)["id"]
    tail = ("tail", sid, *common, "--follow", "--timeout", "3")
    started = time.monotonic()
    tailed = client_venv.run("session-core-cli", *tail, timeout=30)
    took = time.monotonic() - started
    assert tailed.returncode == 0, tailed.stderr
    assert "hello from the client wheel" in tailed.stdout
    assert took < 8, f"tail --follow --timeout 3 took {took:.1f} s with the interpreter's start"
    # the command's own time, without the interpreter's start and the imports (seconds each
    # on a loaded machine): the same entry point, timed inside the venv's Python
    timed = client_venv.run("python", "-c", (
        "import sys, time; from session_core_client.cli.main import run; "
        f"t = time.monotonic(); code = run({list(tail)!r}); "
        "print(f'{time.monotonic() - t:.3f}', file=sys.stderr); sys.exit(code)"), timeout=30)
    assert timed.returncode == 0, timed.stderr
    own = float(timed.stderr.strip().splitlines()[-1])
    assert 3 <= own < 4, f"tail --follow --timeout 3 ran {own:.2f} s"

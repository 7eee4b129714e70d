"""Every ``session-core`` command and every ``session-core-cli`` subcommand answers ``--help``
with its usage and exit code 0, without starting anything: Kafka, the store and the API point at
a closed port, so a command that tried to connect would fail or hang."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from services.cli import COMMANDS
from session_core_client.cli.main import COMMANDS as CLI_COMMANDS
from session_core_client.cli.main import run as cli_run

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*args: str, timeout: float = 30, module: str = "services.cli"
         ) -> subprocess.CompletedProcess[str]:
    port = _closed_port()
    env = {**os.environ, "PYTHONPATH": str(REPO),
           "KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}",
           "MONGODB_URI": f"mongodb://127.0.0.1:{port}/?serverSelectionTimeoutMS=500",
           "SESSION_CORE_API": f"http://127.0.0.1:{port}"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_answers_help_without_side_effects(command: str) -> None:
    out = _run(command, "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"usage: session-core {command}"), out.stdout[:200]


@pytest.mark.parametrize("sub", sorted(CLI_COMMANDS))
def test_every_cli_subcommand_answers_help(sub: str, capsys: pytest.CaptureFixture[str]
                                           ) -> None:
    with pytest.raises(SystemExit) as done:
        cli_run([sub, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: session-core-cli {sub}")


def test_top_level_help_lists_every_command_and_version() -> None:
    out = _run("--help")
    assert out.returncode == 0
    for command in COMMANDS:
        assert command in out.stdout
    version = _run("--version")
    assert version.returncode == 0 and version.stdout.startswith("session-core ")


def test_a_service_refuses_unknown_arguments_instead_of_starting() -> None:
    out = _run("storage", "--bogus")
    assert out.returncode == 2 and "unrecognized arguments" in out.stderr


# make test-slow: waits out the client's retry budget against a closed port, twice
@pytest.mark.slow
def test_json_errors_are_json_and_unreachable_is_one_line() -> None:
    out = _run("--json", "session", "session_" + "0" * 32, module="session_core_client.cli")
    assert out.returncode == 2
    body = json.loads(out.stdout)
    assert body["error"]["type"] == "unreachable"
    assert "cannot reach the API" in body["error"]["message"]
    plain = _run("session", "session_" + "0" * 32, module="session_core_client.cli")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert len(plain.stderr.strip().splitlines()) == 1, plain.stderr


# the server extras, as an install without them lacks them: importing any of them fails
SERVER_ONLY = ("structlog", "pydantic", "pydantic_settings", "faststream", "aiokafka", "pymongo",
               "PIL", "fastapi", "uvicorn", "uvloop", "prometheus_client", "cachetools")


def _run_without_server_extras(*args: str) -> subprocess.CompletedProcess[str]:
    hide = "; ".join(f"sys.modules[{m!r}] = None" for m in SERVER_ONLY)
    code = f"import sys; {hide}; from services.cli import main; main({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=30, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_hash_key_and_help_work_on_an_install_without_the_server_extras() -> None:
    made = _run_without_server_extras("hash-key", "acme", "a-key-of-enough-length-0123456789")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("acme:")
    helped = _run_without_server_extras("--help")
    assert helped.returncode == 0 and "hash-key" in helped.stdout, helped.stderr


def test_a_service_without_the_server_extras_says_what_to_install() -> None:
    out = _run_without_server_extras("storage")
    assert out.returncode == 1
    assert "pip install 'session-core[server]'" in out.stderr
    assert "Traceback" not in out.stderr

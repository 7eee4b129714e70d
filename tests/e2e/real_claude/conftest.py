"""e2e over the real Claude Code: the four services plus Runtimes with ``--engine real``
(each drives real ``claude`` processes) on the shared stack's fixtures, and the scripted model
server in this test process (tests register scripts and read what the model received)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtimes.claude import process as claude_process
from scripted_model.server import ModelServer
from tests.support.processes import Core, launched
from tests.support.skips import unavailable
from tests.support.system import ItemCollector

API_KEY = "e2e-real-claude"

if not Path(claude_process.default_binary()).exists():  # pragma: no cover
    unavailable("claude not installed (python3 -m deploy.local.stack install)", module=True)


@pytest.fixture(scope="package")
def cmodel() -> Iterator[ModelServer]:
    ms = ModelServer().start()
    yield ms
    ms.stop()


def real_runtimes(model_url: str) -> dict[str, list[str]]:
    real = ["--harness", "claude_code", "--engine", "real", "--model-base-url", model_url]
    return {
        # placement none: Claude Code with an image-capable model
        "claude_real": [*real, "--placements", "none"],
        # placement openai_hosted: Claude Code with a text-only model (--no-images)
        "claude_real_noimg": [*real, "--placements", "openai_hosted", "--no-images"],
    }


@pytest.fixture(scope="package")
def ccore(stack: Any, cmodel: ModelServer, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Core]:
    with launched(stack, tmp_path_factory.mktemp("e2e-real-claude-logs"), real_runtimes(cmodel.url),
                  API_KEY, prefix="rcl", label="e2e real claude") as c:
        yield c


@pytest.fixture(scope="package")
async def citems(ccore: Core) -> AsyncIterator[ItemCollector]:
    async with ItemCollector(ccore.settings) as col:
        yield col


@pytest.fixture
async def capi(ccore: Core) -> AsyncIterator[httpx.AsyncClient]:
    async with ccore.client(timeout=90) as c:
        yield c

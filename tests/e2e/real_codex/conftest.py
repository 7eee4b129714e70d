"""e2e over the real Codex: the four services plus Runtimes with ``--engine real`` (each drives
real ``codex app-server`` processes) on the shared stack's fixtures, and the scripted model
server in this test process (so tests register scripts and read what the model received)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from runtimes.live import default_binary
from scripted_model.server import ModelServer
from tests.support.processes import Core, launched
from tests.support.skips import unavailable
from tests.support.system import ItemCollector

API_KEY = "e2e-real-codex"

try:
    default_binary("codex")
except FileNotFoundError:  # pragma: no cover - the install step puts it in the cache
    unavailable("codex not installed (python3 -m deploy.local.stack install)", module=True)


@pytest.fixture(scope="package")
def model() -> Iterator[ModelServer]:
    ms = ModelServer().start()
    yield ms
    ms.stop()


def real_runtimes(model_url: str) -> dict[str, list[str]]:
    real = ["--harness", "codex", "--engine", "real", "--model-base-url", model_url + "/v1"]
    return {
        # placement none: a Codex with an image-capable model
        "codex_real": [*real, "--placements", "none"],
        # placement openai_hosted: a Codex whose model is text-only (--no-images)
        "codex_real_noimg": [*real, "--placements", "openai_hosted", "--no-images"],
        # placement self_hosted: a broken adapter that drops the images it answers with
        "codex_real_broken": [*real, "--placements", "self_hosted", "--corrupt", "drop_image"],
    }


@pytest.fixture(scope="package")
def rcore(stack: Any, model: ModelServer, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Core]:
    with launched(stack, tmp_path_factory.mktemp("e2e-real-codex-logs"), real_runtimes(model.url),
                  API_KEY, prefix="rc", label="e2e real codex") as c:
        yield c


@pytest.fixture(scope="package")
async def ritems(rcore: Core) -> AsyncIterator[ItemCollector]:
    async with ItemCollector(rcore.settings) as col:
        yield col


@pytest.fixture
async def rapi(rcore: Core) -> AsyncIterator[httpx.AsyncClient]:
    async with rcore.client(timeout=90) as c:
        yield c

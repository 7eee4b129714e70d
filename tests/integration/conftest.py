"""Fixtures of the integration tests beyond tests/conftest.py's: ``store``, a FerretDB of a
test's own (tests/support/localstack.py), and ``model``, the scripted model server the real
harnesses talk to (one per module)."""

from collections.abc import Iterator

import pytest

from scripted_model.server import ModelServer
from tests.support.localstack import store

__all__ = ["model", "store"]


@pytest.fixture(scope="module")
def model() -> Iterator[ModelServer]:
    ms = ModelServer().start()
    yield ms
    ms.stop()

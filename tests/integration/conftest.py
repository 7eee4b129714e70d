"""Fixtures of the integration tests beyond tests/conftest.py's: ``store``, a FerretDB of a
test's own (tests/support/localstack.py)."""

from tests.support.localstack import store

__all__ = ["store"]

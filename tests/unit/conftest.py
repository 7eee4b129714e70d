"""Unit-test fixtures; the builders of bodies, parts and images are ``tests/support/builders``."""

from __future__ import annotations

import pytest

from services.admission.domain.validation import Limits


@pytest.fixture
def limits() -> Limits:
    return Limits()

"""make test's xdist scheduling (tests/conftest.py): a worker takes a tests/e2e directory whole
(its package fixture launches a Core, which a second worker would launch again) and any other
module whole (its module-scoped fixtures start once)."""

from __future__ import annotations

from tests.conftest import xdist_scope


def test_an_e2e_directory_is_one_unit_of_work() -> None:
    assert xdist_scope("tests/e2e/test_wait.py::test_a") == "tests/e2e"
    assert xdist_scope("tests/e2e/test_flows.py::test_b[x-y]") == "tests/e2e"
    assert xdist_scope("tests/e2e/real_codex/test_real_codex.py::test_c") == "tests/e2e/real_codex"
    assert xdist_scope("tests/e2e/real_claude/test_real_claude_agent.py::T::test_d") \
        == "tests/e2e/real_claude"


def test_elsewhere_a_module_is_one_unit_of_work() -> None:
    assert xdist_scope("tests/integration/test_storage.py::test_a[p@1]") \
        == "tests/integration/test_storage.py"
    assert xdist_scope("tests/unit/test_stop_steps.py::test_b") == "tests/unit/test_stop_steps.py"

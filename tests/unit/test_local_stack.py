"""The local stack's process life cycle (deploy.local.stack), with plain commands instead of
Kafka and FerretDB: started in a process group of their own, ready, stopped with their children,
nothing left behind."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import ClassVar

import pytest

from deploy.local.stack import Stack, StackError, base


def _stack(tmp_path: Path, command: str) -> Stack:
    return Stack.on_free_ports(tmp_path / "state", extra=[("job", command)], echo=False)


def _group_gone(pgid: int) -> bool:
    """No live member (zombies, which a container's init may leave unreaped, do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return False
    return True


@pytest.mark.parametrize("kill", [False, True])
def test_a_command_and_its_children_start_and_stop_together(tmp_path: Path, kill: bool) -> None:
    stack = _stack(tmp_path, "sleep 300 & sleep 300")
    (proc,) = stack.up(only=["job"])
    assert [(p.name, alive, ready) for p, alive, ready in stack.status()] == [("job", True, True)]
    assert not _group_gone(proc.pgid)
    stack.down(kill=kill)
    assert _group_gone(proc.pgid)
    assert stack.status() == []
    out = "".join(stack.output)
    assert f"job: {'SIGKILL' if kill else 'SIGTERM'} to process group {proc.pgid}" in out
    assert "job: stopped" in out


def test_a_command_that_exits_during_start_up_fails_the_start_with_its_log(
        tmp_path: Path) -> None:
    stack = _stack(tmp_path, "echo about to fail; exit 3")
    with pytest.raises(StackError, match="job exited during start-up") as err:
        stack.up(only=["job"])
    assert "about to fail" in str(err.value)
    assert stack.status() == []


def test_the_environment_names_the_stack_unless_infrastructure_is_given(tmp_path: Path) -> None:
    stack = Stack(tmp_path, kafka_port=19092, mongo_port=37017)
    assert stack.env() == {"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19092",
                           "MONGODB_URI": "mongodb://127.0.0.1:37017/"}
    given = Stack(tmp_path, external_kafka="kafka:9092", external_mongo="mongodb://db/")
    assert given.env() == {"KAFKA_BOOTSTRAP_SERVERS": "kafka:9092",
                           "MONGODB_URI": "mongodb://db/"}


def test_the_controller_port_is_never_the_brokers_own() -> None:
    """A reused state dir stored the port this run picked for the broker as its controller
    port: Kafka's format refused two listeners on one port (seen in CI)."""
    from deploy.local.stack.components import pick_controller_port

    free = iter([9092, 9200, 9300])
    assert pick_controller_port(9092, 9092, 27017, lambda p: p != 9093,
                                lambda: next(free)) == 9200
    assert pick_controller_port(9500, 9092, 27017, lambda p: True) == 9500
    assert pick_controller_port(None, 9092, 9093, lambda p: True, lambda: 9400) == 9400


def test_make_run_starts_a_real_runtime_for_each_installed_harness(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``make run``'s demo runs on the real binaries: with both pinned harnesses installed,
    the stack starts a real Runtime (``--engine real``, placements none and openai_hosted) per
    harness and leaves only ``self_hosted`` to their simulated Runtimes (a path check of a
    moved module once kept the real Runtimes from starting at all)."""
    from deploy.local.stack import components
    from deploy.local.stack.components import Options
    from deploy.local.stack.processes import State

    fake_bin = tmp_path / "bin"
    fake_bin.write_text("")
    monkeypatch.setattr(components, "harness_bin", lambda name: fake_bin)
    monkeypatch.setattr(components, "harness_versions", lambda: None)
    opts = Options(state=State(tmp_path), venv=tmp_path, with_services=True, runtimes=True,
                   model_url="http://127.0.0.1:1")
    comps = {c.name: c for c in components.runtime_components(opts, tmp_path / "exe", {})}
    for harness in ("codex", "claude_code"):
        real = comps[f"runtime-{harness}-real"].cmd
        assert real[real.index("--engine") + 1] == "real"
        assert real[real.index("--placements") + 1] == "none,openai_hosted"
        sim = comps[f"runtime-{harness}"].cmd
        assert sim[sim.index("--placements") + 1] == "self_hosted"
    assert "runtime-minimax_code-real" not in comps


class _Kernel:
    """Hands out the lowest port not bound right now: as a kernel may hand a just-closed port out
    again."""

    bound: ClassVar[set[int]] = set()

    class Socket:
        def __init__(self, *_: object) -> None:
            self.port = 0

        def __enter__(self) -> _Kernel.Socket:
            return self

        def __exit__(self, *_: object) -> None:
            _Kernel.bound.discard(self.port)

        def bind(self, _addr: object) -> None:
            self.port = min(p for p in range(5000, 5100) if p not in _Kernel.bound)
            _Kernel.bound.add(self.port)

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)


def test_the_ports_of_one_stack_are_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka, its controller and the store each get a port of their own, even from a kernel
    that hands a just-closed port out again: every socket stays bound until all are picked (a
    clean CI run once gave Kafka and FerretDB the same port)."""

    monkeypatch.setattr(base.socket, "socket", _Kernel.Socket)
    assert sorted(base.free_ports(3)) == [5000, 5001, 5002]
    st = Stack.on_free_ports(Path("/nonexistent-state"))
    assert len({st.kafka_port, st.mongo_port, st.controller_port}) == 3
    assert not _Kernel.bound


def test_a_kafka_cluster_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kafka's format tool reads ``-t -N19…`` as an option and fails: a CI run lost its SASL
    broker to such an id. uuid4 is made to give a dash-first id before a good one."""
    first_dash = uuid.UUID(bytes=b"\xf8" + bytes(15))  # base64 "-A…"
    good = uuid.UUID(bytes=b"\x00" * 16)
    ids = iter([first_dash, good])
    monkeypatch.setattr(base.uuid, "uuid4", lambda: next(ids))
    cid = base.kafka_cluster_id()
    assert cid == "A" * 22 and len(cid) == 22

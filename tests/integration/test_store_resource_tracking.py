"""The local store is built with FerretDB's resource tracking off (deploy/local/ferretdb/_overlay,
docs/local-stack.md, "The FerretDB wrapper"): upstream v1.24 tracks every iterator, transaction
and row set in a release build too, each one a pprof profile entry with a captured stack and a
finalizer — about 8-9 % of the store's CPU under the product's load.

Upstream's ``resource.Track`` creates a pprof profile named ``FerretDB/<type>`` the first time it
tracks an object of that type, and the profile stays listed on ``/debug/pprof/``. So after
inserts, finds (a cursor) and an update, the index of the wrapper's ``-pprof-listen`` must list
no ``FerretDB/`` profile: with upstream's file ten are listed (``FerretDB/cursor.Cursor``,
``FerretDB/fsql.Tx``, ``FerretDB/sqlite.queryIterator``, …). The build's guard is tested too: a
pinned upstream sha256 that does not match the module's file stops the build."""

from __future__ import annotations

import shutil
import urllib.request
import uuid
from pathlib import Path

import pytest

from deploy.local.stack import install
from deploy.local.stack.base import FERRET_OVERLAY, StackError, free_port
from tests.support.localstack import Store
from tests.support.skips import unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # make test-slow (README)


def profiles_listed(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/pprof/?debug=1",
                                timeout=10) as r:
        page = r.read().decode()
    assert "goroutine" in page, page[:500]  # the index itself was served
    return [line for line in page.splitlines() if "FerretDB/" in line]


def test_the_store_tracks_no_resources(store: Store) -> None:
    port = free_port()
    store.extra = ["-pprof-listen", f"127.0.0.1:{port}"]
    with store.run(), store.client() as client:
        coll = client[f"track_{uuid.uuid4().hex[:8]}"]["docs"]
        coll.insert_many([{"_id": str(i), "v": i} for i in range(50)])
        assert coll.find_one({"_id": "3"}) == {"_id": "3", "v": 3}
        assert len(list(coll.find().batch_size(10))) == 50  # a cursor over several batches
        coll.update_one({"_id": "4"}, {"$set": {"v": 9}})
        assert coll.find_one({"_id": "4"}) == {"_id": "4", "v": 9}
        assert profiles_listed(port) == []


def test_a_patch_for_another_upstream_file_stops_the_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    go = shutil.which("go")  # as the install finds it (install.need_tool)
    if go is None:
        unavailable("no Go toolchain")
    overlay = tmp_path / "_overlay"
    shutil.copytree(FERRET_OVERLAY, overlay)
    pins = overlay / "UPSTREAM.sha256"
    pins.write_text(pins.read_text().replace(
        pins.read_text().splitlines()[-1].split()[0], "0" * 64))
    monkeypatch.setattr(install, "FERRET_OVERLAY", overlay)
    env = install.go_env()
    with pytest.raises(StackError, match="is not the file this patch was written against"):
        install.ferretdb_patched(go, env, tmp_path / "ferretdb-test")
    assert not (tmp_path / "ferretdb-test.module").exists()  # nothing was copied or built


def test_every_overlay_file_has_a_pinned_upstream() -> None:
    pinned = {line.split()[1] for line in (FERRET_OVERLAY / "UPSTREAM.sha256").read_text()
              .splitlines() if line.strip() and not line.startswith("#")}
    patched = {p.relative_to(FERRET_OVERLAY).as_posix() for p in FERRET_OVERLAY.rglob("*.go")}
    assert patched and patched == pinned

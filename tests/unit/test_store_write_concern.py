"""The product asks its store for the production write concern — a majority of the replica set,
journaled — on every client it builds (``shared.store.make_client``, the one client of every
service: ``shared.coreservice``), on every database and collection it writes through, and a
``MONGODB_URI`` that says otherwise does not relax it."""

from __future__ import annotations

import pytest
from pymongo.write_concern import WriteConcern

from shared.settings import Settings
from shared.store import database, make_client

MAJORITY_JOURNALED = WriteConcern(w="majority", j=True)

URIS = ["mongodb://127.0.0.1:27017/",
        "mongodb://127.0.0.1:27017/?w=1",
        "mongodb://127.0.0.1:27017/?w=1&journal=false",
        "mongodb://127.0.0.1:27017/?w=0"]


@pytest.mark.parametrize("uri", URIS)
async def test_every_write_asks_for_a_journaled_majority(uri: str) -> None:
    settings = Settings(MONGODB_URI=uri)
    client = make_client(settings)  # connects lazily
    try:
        assert client.write_concern == MAJORITY_JOURNALED
        assert client.write_concern.document == {"w": "majority", "j": True}
        for service in ("storage", "admission", "dispatcher", "receipts"):
            db = database(client, settings, service)
            assert db.write_concern == MAJORITY_JOURNALED
            assert db["items"].write_concern == MAJORITY_JOURNALED
    finally:
        await client.close()

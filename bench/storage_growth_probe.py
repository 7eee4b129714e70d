"""Per-record cost of the storage handler with N Items already in one Session, on the store at
``MONGODB_URI`` (no Kafka): ``python bench/storage_growth_probe.py 1000 60000``. Prints one line
per N. Caution: after the first sample the Session is in the handler's cache,
so this times cache hits — it is **not** evidence that storage's cost is flat as the store
grows (the growth case measures the real path); a diagnostic, not a benchmark figure."""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pymongo import AsyncMongoClient

from services.storage.domain.sessions import SessionState
from services.storage.handler import StorageHandler
from services.storage.repository import StorageRepository
from shared import records
from shared.kafka import now_rfc3339
from shared.store import ensure_indexes
from shared.storecodec import item_doc, pack


async def probe(uri: str, n: int, samples: int = 30) -> float:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    name = f"probe_growth_{uuid.uuid4().hex[:8]}"
    db = client[name]
    try:
        await ensure_indexes(db)
        sid = "session_" + uuid.uuid4().hex
        for k in range(0, n, 5000):
            hi = min(n, k + 5000)
            await db.items.insert_many([item_doc(
                {"id": f"item_{uuid.uuid4().hex}", "session_id": sid, "sequence": i,
                 "type": "message", "created_at": "x",
                 "content": [{"type": "input_text", "text": "hi"}]}, f"req:{i}#1")
                for i in range(k + 1, hi + 1)])
            await db.journal.insert_many([{"_id": f"req:{i}", "session_id": sid, "payload": "{}"}
                                          for i in range(k + 1, hi + 1)])
        st = SessionState(session_id=sid, harness="codex", placement="none", created_at="x",
                          version=n, last_sequence=n)
        await db.sessions.insert_one({"_id": sid, **pack(
            {k: v for k, v in st.to_doc().items() if k != "_id"})})
        handler = StorageHandler(StorageRepository(db, 256 * 1024, 1024 * 1024), now_rfc3339)

        def record() -> dict[str, Any]:
            return {"schema": records.ADMITTED, "op": records.OP_EVENT,
                    "request_id": "req_" + uuid.uuid4().hex, "session_id": sid,
                    "event_id": "evt_" + uuid.uuid4().hex, "fingerprint": "f",
                    "event_type": records.EV_MESSAGE,
                    "messages": [{"role": "user", "content": [{"type": "input_text",
                                                               "text": "x"}]}]}

        await handler.handle([record()])  # the first batch after start reads the store
        t0 = time.perf_counter()
        for _ in range(samples):
            await handler.handle([record()])
        return (time.perf_counter() - t0) / samples * 1000
    finally:
        await client.drop_database(name)
        await client.close()


def main() -> None:
    uri = os.environ.get("MONGODB_URI", "mongodb://127.0.0.1:27017/")
    for n in [int(a) for a in sys.argv[1:]] or [1000, 60000]:
        ms = asyncio.run(probe(uri, n))
        print(f"{n} Items in the Session: {ms:.1f} ms per single-record batch")


if __name__ == "__main__":
    main()

"""Operations one can watch: after a flow through the running processes, each
service's own ``/metrics`` (its metrics port, as the chart scrapes it) shows its new metrics,
and admission writes a JSON access log line per request."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from tests.support.processes import Core
from tests.support.public import TOOL_RESULT, event, opened_call, wait_item
from tests.support.system import ItemCollector

pytestmark = pytest.mark.e2e


def samples(text: str) -> dict[str, float]:
    """``name{labels}`` → value of every sample line."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def total(s: dict[str, float], name: str, **labels: str) -> float:
    """Sum of ``name`` over the samples whose labels include ``labels``."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(v for k, v in s.items()
               if re.fullmatch(rf"{re.escape(name)}(\{{.*\}})?", k)
               and all(w in k for w in want))


async def test_each_service_shows_its_metrics_after_a_flow(core: Core, api: httpx.AsyncClient,
                                                          items: ItemCollector) -> None:
    sid, call_id, _ = await opened_call(api, items, "codex", "none", "search")
    await event(api, sid, {"type": TOOL_RESULT, "call_id": call_id, "success": True,
                           "output": "42"})
    app = await wait_item(items, sid, type="function_call_application", call_id=call_id)
    assert app["state"] == "applied", app

    async with httpx.AsyncClient(timeout=10) as http:
        m = {svc: samples((await http.get(url)).text) for svc, url in core.metrics_urls.items()}
    assert set(m) == {"admission", "storage", "dispatcher", "receipts"}

    adm = m["admission"]
    # the HTTP histogram covers waits: a bucket at 600 s
    assert total(adm, "session_core_http_request_duration_seconds_count") > 0
    assert any('le="600.0"' in k for k in adm
               if k.startswith("session_core_http_request_duration_seconds_bucket"))
    # the hand-over to storage goes on admission's plain producer (not FastStream's broker)
    assert total(adm, "session_core_kafka_published_records_total") > 0
    # admission proper, a ?wait's wait aside: the p99 alert's histogram
    for op in ("create_session", "add_event"):
        assert total(adm, "session_core_admission_duration_seconds_count", operation=op) > 0

    sto = m["storage"]
    assert total(sto, "session_core_storage_batch_records_count") > 0
    assert total(sto, "session_core_storage_batch_seconds_count") > 0
    assert total(sto, "session_core_store_commands_total", command="insert") > 0
    assert total(sto, "session_core_store_command_duration_seconds_count", command="insert") > 0
    assert total(sto, "faststream_received_messages_total") > 0
    assert total(sto, "session_core_kafka_published_records_total") >= 3  # Item, stored, answer

    dis = m["dispatcher"]
    assert total(dis, "session_core_dispatch_bindings_total", harness="codex") > 0
    assert total(dis, "session_core_dispatch_deliveries_total", kind="start") > 0
    assert total(dis, "session_core_dispatch_deliveries_total", kind="function_result") > 0
    assert total(dis, "session_core_runtimes", harness="codex") >= 1
    # the no-ready-Runtime alert's gauge: the codex Runtime counts, a harness without one is 0
    assert total(dis, "session_core_runtimes_ready", harness="codex") >= 1
    assert dis['session_core_runtimes_ready{harness="minimax_code"}'] == 0

    rec = m["receipts"]
    assert total(rec, "session_core_receipt_verdicts_total", state="applied") > 0
    assert total(rec, "session_core_receipt_verdict_seconds_count") > 0
    assert total(rec, "faststream_received_messages_total") > 0
    # the verdict facts go on the tracker's plain producer too
    assert total(rec, "session_core_kafka_published_records_total") > 0

    # admission's JSON access log: one line per request, with the route's outcome
    assert core.log_dir is not None
    lines = [json.loads(ln) for ln in (core.log_dir / "admission.log").read_text().splitlines()
             if ln.startswith("{")]
    access = [d for d in lines if d.get("event") == "http.access"]
    assert any(d["path"] == f"/v1/sessions/{sid}/events" and d["status"] == 202
               and d["method"] == "POST" and d["duration_ms"] >= 0 for d in access), access[-5:]


async def test_sse_answers_tell_proxies_not_to_buffer(api: httpx.AsyncClient) -> None:
    """ingress-nginx buffers responses unless told otherwise: an SSE stream says so itself."""
    body = {"harness": "codex", "placement": "none", "input": "stream me", "stream": True}
    async with api.stream("POST", "/v1/sessions", json=body) as r:
        assert r.status_code == 201
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-accel-buffering"] == "no"
        assert r.headers["cache-control"] == "no-cache"

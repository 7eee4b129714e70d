"""One JSON stream: the standard library's loggers (aiokafka here, the real one
failing to reach a closed port) come out as JSON lines with the structlog fields, next to
structlog's own lines."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import asyncio, sys
from aiokafka import AIOKafkaProducer
from shared.logging import configure_logging, get_logger, bound
configure_logging("INFO", "json", service="probe")
get_logger("probe").info("probe.start")
async def main():
    p = AIOKafkaProducer(bootstrap_servers="127.0.0.1:%d", request_timeout_ms=1000,
                         retry_backoff_ms=50)
    with bound(request_id="req_probe"):
        try:
            await p.start()
        except Exception as exc:
            get_logger("probe").info("probe.failed", error=type(exc).__name__)
        finally:
            await p.stop()
asyncio.run(main())
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_aiokafka_log_line_is_json_with_the_structlog_fields() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT % _closed_port()],
                         env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=60, check=True)
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert lines, "no log lines at all"
    docs = []
    for ln in lines:
        try:
            docs.append(json.loads(ln))
        except json.JSONDecodeError:
            raise AssertionError(f"a log line is not JSON: {ln!r}") from None
    kafka = [d for d in docs if str(d.get("logger", "")).startswith("aiokafka")]
    assert kafka, f"no aiokafka line among {docs}"
    line = kafka[0]
    assert line["level"] in ("error", "warning"), line
    assert "127.0.0.1" in line["event"], line
    assert line["service"] == "probe" and line["timestamp"].endswith("Z"), line
    assert line["request_id"] == "req_probe", "contextvars reach stdlib lines too"
    assert any(d.get("event") == "probe.failed" for d in docs)

"""Readiness through the clients the services use: the aiokafka admin client for Kafka, PyMongo
for the store, urllib for the services' ``/readyz``. aiokafka and PyMongo come from the venv
and are imported only when a probe runs (``install`` and ``venv`` work without them)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import logging
from collections.abc import Callable
from typing import Any

from .base import StackError, http_ok, listening

PROBE_TIMEOUT = 3.0


def clients_installed() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("aiokafka", "pymongo"))


def _clients_missing() -> StackError:
    return StackError("the readiness probes need aiokafka and PyMongo: run this with the venv's "
                      "python (`make venv`, then `.venv/bin/python -m deploy.local.stack ...`)")


async def _describe_cluster(bootstrap: str, timeout_s: float) -> dict[str, Any]:
    try:
        from aiokafka.admin import AIOKafkaAdminClient
    except ImportError as exc:
        raise _clients_missing() from exc
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="session-core-stack",
                                request_timeout_ms=int(timeout_s * 1000))
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            cluster: dict[str, Any] = await admin.describe_cluster()
            return cluster
    finally:
        await admin.close()


def kafka_cluster(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> dict[str, Any]:
    """The broker's Metadata (brokers, cluster id, controller id). Runs on a thread of its own,
    so it also works while the caller's thread runs an event loop (an async test)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _describe_cluster(f"{host}:{port}", timeout)).result()


def kafka_ready(host: str, port: int) -> Callable[[], bool]:
    """Up and registered: the Metadata lists a broker and a controller."""
    def check() -> bool:
        if not listening(port, host):  # no client (and no client error log) before the socket
            return False
        try:
            md = kafka_cluster(host, port)
        except StackError:
            raise
        except Exception:  # any connection or protocol failure means "not yet"
            return False
        return bool(md.get("brokers")) and int(md.get("controller_id", -1)) >= 0
    return check


def mongo_ping(host: str, port: int, timeout: float = PROBE_TIMEOUT) -> bool:
    """``{ping: 1}`` on the admin database; true when the reply says ok: 1."""
    try:
        from pymongo import MongoClient
    except ImportError as exc:
        raise _clients_missing() from exc
    ms = int(timeout * 1000)
    client: MongoClient[dict[str, Any]] = MongoClient(
        host, port, directConnection=True, serverSelectionTimeoutMS=ms, connectTimeoutMS=ms,
        socketTimeoutMS=ms, appname="session-core-stack")
    try:
        return float(client.admin.command("ping").get("ok", 0)) == 1.0
    finally:
        client.close()


def mongo_ready(host: str, port: int) -> Callable[[], bool]:
    def check() -> bool:
        if not listening(port, host):
            return False
        try:
            return mongo_ping(host, port)
        except StackError:
            raise
        except Exception:  # PyMongoError, OSError: not yet
            return False
    return check


def http_ready(url: str) -> Callable[[], bool]:
    return lambda: http_ok(url + "/readyz")


def quiet_client_logs() -> None:
    """The launcher's own process only: a probe of a broker that is still starting makes aiokafka
    log connection errors, which are expected there."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

"""``python -m bench.serve_product [--profile OUT]`` — the product's hot path in one process:
storage (``session.admitted`` → store → ``session.items`` + reply) and admission (uvicorn on
``SESSION_CORE_HTTP_PORT``), configured from the environment exactly as the services are. The
dispatcher and the receipt tracker are not started: nothing on the HTTP → Item path waits for
them. Prints ``READY`` when both are up; stops on SIGTERM/SIGINT. With ``--profile`` the whole
process runs under pyinstrument and the report is written to OUT (.txt and .html)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from contextlib import suppress
from typing import Any

from services.admission.app import AdmissionService
from services.storage.app import StorageService
from shared.logging import configure_logging
from shared.settings import get_settings


async def serve() -> None:
    settings = get_settings()
    configure_logging(settings.log_level, "json", service="bench-product")
    storage = StorageService(settings)
    admission = AdmissionService(settings)
    await storage.start()
    await admission.start()
    print("READY", flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with suppress(NotImplementedError):
            loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    await admission.stop()
    await storage.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default=None)
    args = ap.parse_args()
    if not args.profile:
        asyncio.run(serve())
        return
    from pyinstrument import Profiler

    profiler: Any = Profiler(interval=0.002, async_mode="disabled")
    profiler.start()
    try:
        asyncio.run(serve())
    finally:
        profiler.stop()
        with open(args.profile + ".txt", "w") as f:
            f.write(profiler.output_text(unicode=True, color=False, show_all=False))
        with open(args.profile + ".html", "w") as f:
            f.write(profiler.output_html())
        print(f"profile written to {args.profile}.txt/.html", file=sys.stderr)


if __name__ == "__main__":
    main()

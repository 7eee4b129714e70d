"""Placeholder: being written (issue 16)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from services.modelserver.script import Scripts


async def handle(scripts: Scripts, path: str, raw: str, body: dict[str, Any]) -> Response:
    scripts.take("messages", path, raw, body)
    return JSONResponse({"error": "not written yet"}, status_code=501)

"""A producer over HTTP with the client library: an image message to a Claude Code Session, then
a Codex Session whose agent calls a function, answered with a function result.

Needs the client distribution only (httpx; the picture is made with the standard library):

    pip install ./packaging/client        # session-core-client, from a checkout of this repo
    SESSION_CORE_API=http://127.0.0.1:8080 python examples/producer_http.py

Against the reference Runtime (`make run`), the text ``call get_weather {...}`` makes the agent
call ``get_weather``; a real harness calls it when its model decides to.
"""

from __future__ import annotations

import os
import struct
import sys
import time
import zlib

from session_core_client import Client, image_part, message, text_part


def picture(width: int = 32, height: int = 24, rgb: tuple[int, int, int] = (30, 120, 200)
            ) -> bytes:
    """A one-colour PNG: signature, IHDR (8-bit RGB), one zlib-compressed IDAT, IEND."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    rows = (b"\x00" + bytes(rgb) * width) * height  # filter type 0 before each row
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def main() -> int:
    api = os.environ.get("SESSION_CORE_API", "http://127.0.0.1:8080")
    with Client(api, os.environ.get("SESSION_CORE_API_KEY")) as client:
        png = picture()
        s = client.create_session("claude_code", [message(text_part("What is in this picture?"),
                                                          image_part(png))],
                                  wait=True, timeout_ms=60_000)
        sent = s["items"][0]["content"][1]["image_url"]
        assert sent == image_part(png)["image_url"], "the image came back changed"
        print(f"image message stored in {s['id']}: {len(s['items'])} Items, image byte for byte")

        s = client.create_session("codex", 'Weather please: call get_weather {"city": "Paris"}')
        sid = s["id"]
        deadline = time.monotonic() + 60
        call = None
        while call is None:
            call = next((i for i in client.items(sid) if i["type"] == "function_call"), None)
            if call is None:
                if time.monotonic() > deadline:
                    print("no function call within 60 s", file=sys.stderr)
                    return 1
                time.sleep(0.2)
        print(f"{sid}: the agent called {call['name']}({call['arguments']})")
        done = client.submit_tool_result(sid, call["call_id"], success=True,
                                         output=[text_part("sunny, 21 °C")],
                                         wait=True, timeout_ms=60_000)
        print(f"result {done['event_id']} delivery={done['delivery']}")
        state = None
        while state not in ("applied", "uncertain", "failed"):
            state = client.get_tool_result(sid, call["call_id"])["state"]
            if time.monotonic() > deadline + 30:
                break
            time.sleep(0.2)
        print(f"application of {call['call_id']}: {state}")
        return 0 if state == "applied" else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The bench's open-loop client (bench/load.py ``RawHttp``) opens a connection again when it
has been idle longer than the server keeps it: at a low rate over many connections each one
idles past uvicorn's 5 s keep-alive, and a request written into a connection the server has
closed got no answer and was counted as a failed request (half the growth case's requests at
43/s, 2026-12-06)."""

from __future__ import annotations

import asyncio

from bench.load import RawHttp

ANSWER = b"HTTP/1.1 202 Accepted\r\ncontent-length: 2\r\n\r\n{}"


async def serve_with_keep_alive(timeout_s: float) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout_s)
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                writer.write(ANSWER)
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def two_posts_apart(idle_s: float) -> list[int | str]:
    server = await serve_with_keep_alive(timeout_s=0.3)
    port = server.sockets[0].getsockname()[1]
    http = RawHttp(f"http://127.0.0.1:{port}", idle_s=idle_s)
    out: list[int | str] = []
    try:
        for _ in range(2):
            try:
                out.append(await http.post("/x", b"{}"))
            except (OSError, EOFError, ValueError, IndexError) as exc:
                out.append(type(exc).__name__)
            await asyncio.sleep(0.6)  # longer than the server keeps an idle connection
    finally:
        http.close()
        server.close()
    return out


def test_an_idle_connection_is_opened_again_before_the_server_drops_it() -> None:
    assert asyncio.run(two_posts_apart(idle_s=0.2)) == [202, 202]


def test_without_it_the_request_into_the_dropped_connection_fails() -> None:
    got = asyncio.run(two_posts_apart(idle_s=10.0))
    assert got[0] == 202 and got[1] != 202

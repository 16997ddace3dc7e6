"""The HTTP server keeps an idle connection open longer than a client keeps its own."""

import asyncio

import pytest
from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

from memledger_platform import http_server

REQUEST = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    await PlainTextResponse("ok")(scope, receive, send)


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    writer.write(REQUEST)
    await writer.drain()
    return await asyncio.wait_for(reader.readuntil(b"ok"), timeout=5)


def test_an_idle_connection_is_closed_by_the_configured_keep_alive(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The server's timer is shortened so the test is quick; what is checked is that the
    # configured keep-alive is used rather than uvicorn's 5 s.
    monkeypatch.setattr(http_server, "KEEP_ALIVE_SECONDS", 1.5)

    async def scenario() -> tuple[bytes, bytes, bytes]:
        sock = http_server.bind("127.0.0.1", None, fallback=0, setting="TEST_PORT")
        port = sock.getsockname()[1]
        stop = asyncio.Event()
        serving = asyncio.create_task(http_server.serve(_app, sock, stop))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        first = await _answer(reader, writer)
        await asyncio.sleep(1.0)  # idle, within the keep-alive
        second = await _answer(reader, writer)
        await asyncio.sleep(2.5)  # idle past it: the server closes
        closed = await asyncio.wait_for(reader.read(), timeout=1.5)
        writer.close()
        stop.set()
        await serving
        return first, second, closed

    first, second, closed = asyncio.run(scenario())
    assert first.startswith(b"HTTP/1.1 200")
    assert second.startswith(b"HTTP/1.1 200")
    assert closed == b""


def test_the_server_outlasts_a_clients_keep_alive() -> None:
    # aiohttp keeps an idle connection 15 s, load balancers commonly 60 s.
    assert http_server.KEEP_ALIVE_SECONDS > 60

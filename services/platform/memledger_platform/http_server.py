"""Serving an ASGI app on a socket we bind ourselves, so a busy port is reported clearly
(or, when the port was not chosen by the user, replaced by a free one)."""

import asyncio
import contextlib
import errno
import logging
import socket

import uvicorn
from starlette.types import ASGIApp

log = logging.getLogger(__name__)

KEEP_ALIVE_SECONDS = 75


class PortBusyError(RuntimeError):
    """The configured port is taken; the message names the setting to change."""


def bind(host: str, port: int | None, *, fallback: int, setting: str) -> socket.socket:
    """A listening socket on ``port``; with ``port=None`` try ``fallback`` and, if it is busy,
    any free port (the caller announces the address it got)."""
    if port is not None:
        try:
            return _listen(host, port)
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            raise PortBusyError(f"port {port} on {host} is already in use: set {setting} to "
                                "another port, or unset it to pick a free one") from None
    try:
        return _listen(host, fallback)
    except OSError:
        return _listen(host, 0)


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{host}:{port}"


async def serve(app: ASGIApp, sock: socket.socket, stop: asyncio.Event) -> None:
    """Serve until ``stop`` is set, then finish in-flight requests and return."""
    # Idle connections stay open longer than clients keep theirs (aiohttp 15 s, proxies up to
    # 60 s), so the client closes first: a server closing at 5 s races a client reusing the
    # connection for its next request, which then fails with "server disconnected".
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=10, timeout_keep_alive=KEEP_ALIVE_SECONDS)
    server = uvicorn.Server(config)
    # The process owner (``memledger up``) handles signals and sets ``stop``.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign, assignment]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await stop.wait()
    server.should_exit = True
    await task

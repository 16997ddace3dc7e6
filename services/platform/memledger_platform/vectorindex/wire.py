"""How the embedded vector index is reached: a Unix socket in the data directory, made its
owner's only (0600, in a directory that is 0700), carrying length-prefixed pickles.

A request is ``(method, args)``; its answer ``("ok", result)`` or ``("error", exception)``.
Pickle is safe here because only the owner of the data directory can connect, and it carries
the index's own types (points, hits, scopes, exceptions) as they are.
"""

import contextlib
import os
import pickle
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

_HEADER = struct.Struct("!Q")
_MAX_PATH = 100
"""A Unix socket's path holds 108 bytes: a longer one is reached through its directory."""

REPEATABLE = frozenset({"search", "search_sparse", "search_both", "vectors", "payloads",
                        "points", "session_messages", "count", "graph"})
"""Calls that write nothing: sending one again after a lost connection is harmless."""
CALLS = REPEATABLE | {"upsert", "delete", "delete_subject", "flush", "optimize"}
"""The ``VectorIndex`` methods the index process answers (closing is its owner's alone)."""


def send(sock: socket.socket, value: Any) -> None:
    """Send one frame (an exception that cannot be pickled goes as its text)."""
    try:
        data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception:
        data = pickle.dumps(("error", RuntimeError(repr(value))), pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


def receive(sock: socket.socket) -> Any:
    """The next frame; ``EOFError`` if the other end has closed the connection."""
    (size,) = _HEADER.unpack(_exactly(sock, _HEADER.size))
    # Only the owner of the data directory can connect (see the module's docstring).
    return pickle.loads(_exactly(sock, size))  # noqa: S301


def _exactly(sock: socket.socket, size: int) -> bytearray:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        read = sock.recv_into(view[got:], size - got)
        if read == 0:
            raise EOFError("the vector index connection was closed")
        got += read
    return buffer


def connect(address: Path) -> socket.socket:
    """A connection to the index process serving at ``address`` (``OSError`` if none does)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _reachable(address) as path:
            sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def listen(address: Path) -> socket.socket:
    """A listening socket at ``address``, its owner's only. A socket file left there is
    replaced: whoever calls this holds the shard's lock, so no other process serves it."""
    address.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)  # made 0600, never readable by others even for a moment
    try:
        with _reachable(address) as path:
            sock.bind(path)
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    finally:
        os.umask(previous)
    address.chmod(0o600)
    return sock


@contextlib.contextmanager
def _reachable(address: Path) -> Iterator[str]:
    """``address`` as a socket path short enough to use: itself, or (when too long) the same
    file through a descriptor of its directory."""
    if len(os.fsencode(address)) <= _MAX_PATH:
        yield str(address)
        return
    directory = os.open(address.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{directory}/{address.name}"
    finally:
        os.close(directory)

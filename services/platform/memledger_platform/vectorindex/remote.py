"""``VectorIndex`` served by another process: the embedded index process that the vectors
service owns (``process.ProcessVectorIndex``), reached over its socket (``wire``).

Any number of processes connect to it at once: every query replica reads the one shard the
vector projector writes. The index process answers each connection in a thread of its own; the
engine still runs one call at a time.
"""

import socket
import threading
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memledger_platform.vectorindex import wire
from memledger_platform.vectorindex.port import (
    GraphState,
    Hit,
    IndexedPoint,
    IndexUnavailable,
    Scope,
    SparseVector,
    Vector,
    VectorIndex,
)


class _Lost(Exception):
    """The connection broke during a call."""


class ForwardedVectorIndex(VectorIndex):
    """A ``VectorIndex`` whose calls are all answered elsewhere, through ``_call``."""

    @abstractmethod
    def _call(self, method: str, *args: Any) -> Any:
        """The answer to ``method(*args)``, or what it raised."""

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        if points:
            self._call("upsert", list(points))

    def delete(self, point_ids: Sequence[str]) -> None:
        if point_ids:
            self._call("delete", list(point_ids))

    def search(self, vector: Sequence[float], scope: Scope, k: int,
               fields: Sequence[str] | None = None) -> list[Hit]:
        found: list[Hit] = self._call("search", list(vector), scope, k, _listed(fields))
        return found

    def search_sparse(self, query: SparseVector, scope: Scope, k: int,
                      fields: Sequence[str] | None = None) -> list[Hit]:
        found: list[Hit] = self._call("search_sparse", query, scope, k, _listed(fields))
        return found

    def search_both(self, vector: Sequence[float] | None, query: SparseVector | None,
                    scope: Scope, k: int, fields: Sequence[str] | None = None
                    ) -> tuple[list[Hit], list[Hit]]:
        if vector is None and (query is None or not query.indices):
            return [], []
        found: tuple[list[Hit], list[Hit]] = self._call(
            "search_both", None if vector is None else list(vector), query, scope, k,
            _listed(fields))
        return found

    def payloads(self, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        if not point_ids:
            return {}
        found: dict[str, dict[str, Any]] = self._call("payloads", list(point_ids))
        return found

    def vectors(self, point_ids: Sequence[str]) -> dict[str, Vector]:
        if not point_ids:
            return {}
        found: dict[str, Vector] = self._call("vectors", list(point_ids))
        return found

    def points(self, tenant: str, item_id: str) -> list[IndexedPoint]:
        found: list[IndexedPoint] = self._call("points", tenant, item_id)
        return found

    def session_messages(self, tenant: str, session: str, before: int) -> list[IndexedPoint]:
        found: list[IndexedPoint] = self._call("session_messages", tenant, session, before)
        return found

    def delete_subject(self, tenant: str, subject_id: str) -> int:
        return int(self._call("delete_subject", tenant, subject_id))

    def count(self) -> int:
        return int(self._call("count"))

    def graph(self) -> GraphState:
        found: GraphState = self._call("graph")
        return found

    def flush(self) -> None:
        self._call("flush")

    def optimize(self) -> None:
        self._call("optimize")


def _listed(fields: Sequence[str] | None) -> list[str] | None:
    return None if fields is None else list(fields)


class SocketVectorIndex(ForwardedVectorIndex):
    """The index at ``address``, one call at a time from this object. Nothing is connected
    until the first call; a connection lost (the index process restarted) is replaced at the
    next call, and a call that writes nothing is sent once more on a new connection when it
    found its old one gone. ``IndexUnavailable`` when no process serves ``address``."""

    def __init__(self, address: Path) -> None:
        self._address = address
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._closed = False

    def close(self) -> None:
        """Let go of the connection (the index itself is its owner's to close)."""
        with self._lock:
            self._closed = True
            self._drop()

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            if self._closed:
                raise IndexUnavailable("this connection to the vector index was closed")
            reused = self._sock is not None
            try:
                return self._exchange(method, args)
            except _Lost as lost:
                if not (reused and method in wire.REPEATABLE):
                    raise self._unavailable() from lost.__cause__
            try:  # the connection had gone stale (the index process restarted meanwhile)
                return self._exchange(method, args)
            except _Lost as lost:
                raise self._unavailable() from lost.__cause__

    def _exchange(self, method: str, args: tuple[Any, ...]) -> Any:
        """One call; with the lock held. A connection left half-way (broken, or this thread
        interrupted) is never used again: its next answer could be this call's."""
        if self._sock is None:
            try:
                self._sock = wire.connect(self._address)
            except OSError as error:
                raise self._unavailable() from error
        try:
            wire.send(self._sock, (method, args))
            kind, value = wire.receive(self._sock)
        except (EOFError, OSError) as error:
            self._drop()
            raise _Lost from error
        except BaseException:
            self._drop()
            raise
        if kind == "error":
            raise value
        return value

    def _unavailable(self) -> IndexUnavailable:
        return IndexUnavailable(f"no vector index is serving at {self._address} (it is "
                                "started by `memledger vectors`, or by `memledger up`)")

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

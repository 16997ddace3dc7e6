"""The PostgreSQL connections a store is using right now, so that another thread can make the
calls on them fail (``EventStore.interrupt``): first politely (a cancel request: the server
rolls the statement back and the connection stays usable), then, for a call that still has not
returned, by shutting its socket down (the call fails at once; the pool replaces the broken
connection)."""

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from memledger_platform.eventstore.port import Interrupted

log = logging.getLogger(__name__)

CANCEL_WAIT_SECONDS = 2.0
"""How long an interrupted call has to return after its cancel request before its socket is
shut down (a server stuck waiting on the client never acts on a cancel)."""


class BusyConnections:
    def __init__(self) -> None:
        self._busy: dict[int, psycopg.Connection[Any]] = {}
        self._interrupted: set[int] = set()
        self._changed = threading.Condition()

    def __len__(self) -> int:
        """How many calls are in progress."""
        with self._changed:
            return len(self._busy)

    @contextmanager
    def track(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Mark ``conn`` as in use for the block; an error raised in the block because of an
        ``interrupt`` is raised as ``Interrupted``."""
        key = id(conn)
        with self._changed:
            self._busy[key] = conn
        try:
            yield
        except Exception as error:
            if key in self._interrupted:
                raise Interrupted(f"interrupted: {error}") from error
            raise
        finally:
            with self._changed:
                del self._busy[key]
                self._interrupted.discard(key)
                self._changed.notify_all()

    def interrupt(self, cancel_wait: float = CANCEL_WAIT_SECONDS) -> None:
        """Make every call in progress fail soon; block until each has returned or had its
        socket shut down (at most about ``cancel_wait`` seconds after the cancels are sent)."""
        with self._changed:
            busy = dict(self._busy)
            self._interrupted.update(busy)
        for conn in busy.values():
            _cancel(conn)
        with self._changed:
            self._changed.wait_for(lambda: not busy.keys() & self._busy.keys(), cancel_wait)
            stuck = [conn for key, conn in busy.items() if key in self._busy]
        for conn in stuck:
            log.warning("a call on PostgreSQL did not return after its cancel request; "
                        "shutting its connection down")
            _sever(conn)


def _cancel(conn: psycopg.Connection[Any]) -> None:
    try:
        conn.cancel_safe(timeout=CANCEL_WAIT_SECONDS)
    except Exception as error:  # the socket shutdown that follows does not need it
        log.warning("cancel request to PostgreSQL failed: %s", error)


def _sever(conn: psycopg.Connection[Any]) -> None:
    # A duplicate of the descriptor: shutting it down ends the connection itself, while
    # closing the duplicate leaves the original descriptor to psycopg, which still owns it.
    with contextlib.suppress(Exception), socket.socket(fileno=os.dup(conn.pgconn.socket)) as s:
        s.shutdown(socket.SHUT_RDWR)

"""A second process for a rebuild's bulk load: it folds the memory items routed to it and
loads them into the new schema over its own connection, while the rebuild folds the rest.

Items are independent of one another and of everything else, so the rebuild routes each
``memory.*`` event by its stream (an item's events share one) and keeps every other event.
Both processes COPY into the same empty tables (disjoint rows, so neither waits for the
other) once they have checked that no item was folded by both; if one was (a log whose
stream ids do not follow items), the rebuild folds everything itself instead.

Protocol, pickled over the worker's stdin and stdout (a pipe of the rebuild's own):
``(conninfo, schema)``, then ``(first, last, records, keys)`` per batch (``keys``: those
needed to open the records' sealed fields that were not sent before) and ``None`` at the end;
the worker answers ``("stopped", first, last, error)`` or ``("keys", item_keys, only_items)``;
then ``True`` (write and commit) or ``False`` (roll back), answered by ``("done",)``.
Any other failure is answered by ``("failed", error)``.
"""

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from contextlib import suppress
from typing import IO, Any

import psycopg

from memledger_platform.crypto import open_document
from memledger_projector import store
from memledger_projector.bulk import Loader, RebuildStopped, Record, cycle_collector_paused
from memledger_projector.projection import Key


class WorkerFailed(Exception):
    """The fold worker failed for another reason than an event (its error, as text)."""


class _Failure(Exception):
    """An event the worker could not apply, as text (so its repr is the original's)."""

    def __repr__(self) -> str:
        return str(self.args[0])


class FoldWorker:
    """The rebuild's handle on a running worker; ``close`` it in every case."""

    def __init__(self, conninfo: str, target: str) -> None:
        self._process = subprocess.Popen([sys.executable, "-m", __name__],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._send((conninfo, target))

    def fold(self, first: int, last: int, records: list[Record],
             keys: dict[str, bytes | None]) -> None:
        self._send((first, last, records, keys))

    def finish(self) -> tuple[set[Key], bool]:
        """End the log; the worker's item keys and whether it holds nothing else. Raises
        ``RebuildStopped`` if an event it was given could not be applied."""
        self._send(None)
        reply = self._receive()
        if reply[0] == "stopped":
            raise RebuildStopped(reply[1], reply[2], _Failure(reply[3]))
        return reply[1], reply[2]

    def conclude(self, *, write: bool) -> None:
        """Have the worker write its rows and commit (``write``), or roll back."""
        self._send(write)

    def done(self) -> None:
        """Wait until the worker has committed (or rolled back)."""
        self._receive()

    def close(self) -> None:
        """Let the worker exit (it does once done; closing its input ends it otherwise, as
        the end of its input rolls its transaction back), killing it if it does not."""
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _send(self, message: Any) -> None:
        assert self._process.stdin is not None
        try:
            pickle.dump(message, self._process.stdin, pickle.HIGHEST_PROTOCOL)
            self._process.stdin.flush()
        except BrokenPipeError:
            self._receive()  # the worker ended: its answer says why
            raise

    def _receive(self) -> tuple[Any, ...]:
        assert self._process.stdout is not None
        try:
            reply: tuple[Any, ...] = _read(self._process.stdout)
        except EOFError:
            raise WorkerFailed(f"the fold worker exited ({self._process.wait()})") from None
        if reply[0] == "failed":
            raise WorkerFailed(reply[1])
        return reply


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """The worker's side of the protocol."""

    def reply(*message: Any) -> None:
        pickle.dump(message, replies, pickle.HIGHEST_PROTOCOL)
        replies.flush()

    try:
        conninfo, target = _read(requests)
        with psycopg.connect(conninfo, autocommit=True) as conn, cycle_collector_paused():
            store.tune(conn)
            _load(conn, target, requests, reply)
    except EOFError:
        return  # the rebuild ended the conversation (it failed): roll back and end quietly
    except Exception as error:
        with suppress(OSError):  # unless the rebuild is gone already
            reply("failed", repr(error))


def _load(conn: psycopg.Connection[Any], target: str, requests: IO[bytes],
          reply: Callable[..., None]) -> None:
    keys: dict[str, bytes | None] = {}
    with conn.transaction(), Loader(conn, target, lambda d: open_document(d, keys.get)
                                    ) as loader:
        stopped = _fold_all(loader, requests, keys)
        if stopped is not None:
            reply("stopped", stopped.first, stopped.last, repr(stopped.error))
            raise psycopg.Rollback
        loader.end_log()
        reply("keys", loader.item_keys(), loader.holds_only_items())
        if not _read(requests):
            raise psycopg.Rollback
        loader.write()
    reply("done")


def _fold_all(loader: Loader, requests: IO[bytes], keys: dict[str, bytes | None]
              ) -> RebuildStopped | None:
    """Fold every batch until the end of the log; the first failure, if any (after it, the
    batches are only drained)."""
    stopped: RebuildStopped | None = None
    while (batch := _read(requests)) is not None:
        first, last, records, more_keys = batch
        keys.update(more_keys)
        if stopped is None:
            try:
                loader.fold(first, last, records)
            except RebuildStopped as error:
                stopped = error
    return stopped


def _read(stream: IO[bytes]) -> Any:
    # Only ever a pipe between the rebuild and the worker it started.
    return pickle.load(stream)  # noqa: S301


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
    # Done and answered: skip the interpreter's teardown, which would free (and first
    # collect) every object of the fold while the rebuild waits for this process to end.
    os._exit(0)

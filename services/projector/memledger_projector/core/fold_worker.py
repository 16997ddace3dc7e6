"""A second process for a rebuild's bulk load: it reads its share of the log from the event
store, folds the memory items in it and loads them into the new schema over its own
connection, while the rebuild reads and folds the rest.

Items are independent of one another and of everything else, so the log is shared by
stream (an item's events share one): the worker's share is part of the ``memory.*`` events,
the rebuild's is every other event. Each process reads only its own share (the server
filters it), so neither reads, nor passes on, the other's. Both COPY into the same empty
tables (disjoint rows, so neither waits for the other) once they have checked that no item
was folded by both; if one was (a log whose stream ids do not follow items), the rebuild
folds everything itself instead. The change log is the exception: the worker hands its lines
to the rebuild, which writes both shares' while it builds the other tables' indexes.

Protocol, pickled over the worker's stdin and stdout (a pipe of the rebuild's own): the
rebuild sends ``(conninfo, schema, log, share, until, sealed, key_pipes)``; the worker folds
its share up to position ``until`` and answers ``("stopped", first, last, error)`` or
``("folded", item_keys, only_items, count, last)`` (``last``: the position and time of its
last event, or ``None``); then the rebuild sends ``True`` (write and commit) or ``False``
(roll back), answered by ``("done", change_log)`` (its share's change-log lines; empty if
rolled back). Any other failure is answered by ``("failed", error)``. Meanwhile, if the log
is sealed, the worker asks for the keys of the sealed fields it meets over a second pair of
pipes (``key_pipes``), each key once, and the rebuild's key thread answers with the keys
(``None``: destroyed), or with an error as text.
"""

import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Collection
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

import psycopg

from memledger_platform.crypto import Ciphers, open_document, sealed_key_ids
from memledger_platform.logshare import Address, Record, StreamShare, read_share
from memledger_platform.readmodel.projection import Key
from memledger_projector.core import store
from memledger_projector.core.bulk import (
    ChangeLog,
    Loader,
    RebuildStopped,
    cycle_collector_paused,
    fold_pages,
)
from memledger_projector.core.readahead import PAGE, ReadFailed

KeysOf = Callable[[Collection[str]], dict[str, bytes | None]]
"""The subject keys with these ids (``None``: destroyed): ``crypto.Opener.keys``."""


@dataclass(frozen=True)
class Folded:
    """What the worker folded: its items, whether it holds only items, how many events, and
    the position and time of the last one (``None``: its share was empty)."""

    item_keys: set[Key]
    only_items: bool
    count: int
    last: tuple[int, datetime] | None


class WorkerFailed(Exception):
    """The fold worker failed for another reason than an event (its error, as text)."""


class _Failure(Exception):
    """An event the worker could not apply, as text (so its repr is the original's)."""

    def __repr__(self) -> str:
        return str(self.args[0])


class FoldWorker:
    """The rebuild's handle on a running worker folding ``share`` of the log at ``log`` up
    to ``until``; ``keys``: how to open sealed fields (``None``: the log is read as it is).
    ``close`` it in every case."""

    def __init__(self, conninfo: str, target: str, log: Address, share: StreamShare,
                 until: int, keys: KeysOf | None) -> None:
        self._keys = _KeyServer(keys) if keys is not None else None
        child_fds = self._keys.child_fds if self._keys is not None else ()
        self._process = subprocess.Popen([sys.executable, "-m", __name__],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         pass_fds=child_fds)
        if self._keys is not None:
            self._keys.start()
        self._done = False
        self._send((conninfo, target, log, share, until, keys is not None, child_fds))

    def finish(self) -> Folded:
        """Wait until the worker has folded its share; what it folded. Raises
        ``RebuildStopped`` if an event could not be applied."""
        reply = self._receive()
        if reply[0] == "stopped":
            raise RebuildStopped(reply[1], reply[2], _Failure(reply[3]))
        return Folded(*reply[1:])

    def conclude(self, *, write: bool) -> None:
        """Have the worker write its rows and commit (``write``), or roll back."""
        self._send(write)

    def done(self) -> ChangeLog:
        """Wait until the worker has committed (or rolled back); the change-log lines of its
        share (``Loader.change_log``), which it leaves to the rebuild to write."""
        reply = self._receive()
        self._done = True
        change_log: ChangeLog = reply[1]
        return change_log

    def close(self) -> None:
        """Let the worker exit once done, in its own time (giving its memory back takes it a
        while, which the rebuild need not wait for: a thread waits for it); otherwise (the
        rebuild failed or folds alone) end it now, rather than let it fold the rest of its
        share for nothing: the server rolls its transaction back as its connection goes."""
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                stream.close()
        if self._done:
            threading.Thread(target=self._reap, name="fold-worker-exit", daemon=True).start()
            return
        self._process.kill()
        self._reap()

    def _reap(self) -> None:
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if self._keys is not None:
            self._keys.join()

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


class _KeyServer:
    """The rebuild's side of the key pipes: a thread answering the worker's asks for keys
    (the rebuild's own thread is busy folding), until the worker closes its end."""

    def __init__(self, keys: KeysOf) -> None:
        self._keys = keys
        self._asks, asks_child = os.pipe()
        answers_child, self._answers = os.pipe()
        self.child_fds = (asks_child, answers_child)
        self._thread = threading.Thread(target=self._serve, name="rebuild-keys", daemon=True)

    def start(self) -> None:
        """Serve, once the worker holds its ends (closed here, so its exit ends the thread)."""
        for fd in self.child_fds:
            os.close(fd)
        self._thread.start()

    def join(self) -> None:
        self._thread.join(timeout=10)

    def _serve(self) -> None:
        with os.fdopen(self._asks, "rb") as asks, os.fdopen(self._answers, "wb") as answers:
            while True:
                try:
                    wanted = _read(asks)
                except EOFError:
                    return
                try:
                    answer: dict[str, bytes | None] | str = self._keys(wanted)
                except Exception as error:  # the worker fails with it
                    answer = repr(error)
                try:
                    pickle.dump(answer, answers, pickle.HIGHEST_PROTOCOL)
                    answers.flush()
                except BrokenPipeError:
                    return


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """The worker's side of the protocol."""

    def reply(*message: Any) -> None:
        pickle.dump(message, replies, pickle.HIGHEST_PROTOCOL)
        replies.flush()

    try:
        conninfo, target, log, share, until, sealed, key_pipes = _read(requests)
        keys = _Keys(*key_pipes) if sealed else None
        with psycopg.connect(log.conninfo, autocommit=True) as reading, \
                psycopg.connect(conninfo, autocommit=True) as conn, cycle_collector_paused():
            store.tune(conn)
            conn.execute("SET synchronous_commit = off")  # rebuild._commits_unawaited says why
            _load(conn, target, _Share(reading, log, share, until), keys, requests, reply)
    except EOFError:
        return  # the rebuild ended the conversation (it failed): roll back and end quietly
    except ReadFailed as failed:
        with suppress(OSError):
            reply("failed", repr(failed.error))
    except Exception as error:
        with suppress(OSError):  # unless the rebuild is gone already
            reply("failed", repr(error))


@dataclass(frozen=True)
class _Share:
    """The worker's share of the log."""

    conn: psycopg.Connection[Any]
    log: Address
    share: StreamShare
    until: int

    def after(self, position: int) -> list[Record]:
        return read_share(self.conn, self.log.schema, self.log.table, position, self.until,
                          PAGE, self.share)


def _load(conn: psycopg.Connection[Any], target: str, share: _Share, keys: "_Keys | None",
          requests: IO[bytes], reply: Callable[..., None]) -> None:
    ciphers: Ciphers = {}  # keys are served once (``_Keys``): their ciphers are made once too
    opener = (lambda d: open_document(d, keys.key, ciphers)) if keys is not None else None
    loader, written = Loader(conn, target, opener), False
    with conn.transaction():
        try:
            count, last = fold_pages(loader, share.after, keys.seen if keys else None)
        except RebuildStopped as stopped:
            reply("stopped", stopped.first, stopped.last, repr(stopped.error))
            raise psycopg.Rollback from None
        reply("folded", loader.item_keys(), loader.holds_only_items(), count, last)
        if not _read(requests):
            raise psycopg.Rollback
        loader.write()
        written = True
    reply("done", loader.change_log if written else [])  # committed: its rows are in


class _Keys:
    """The worker's side of the key pipes: a key is asked for the first time a sealed field
    needs it, with every other unknown key of the same page (a log holds few subjects' keys
    or many: one ask each, or one per page)."""

    def __init__(self, asks: int, answers: int) -> None:
        self._asks, self._answers = os.fdopen(asks, "wb"), os.fdopen(answers, "rb")
        self._known: dict[str, bytes | None] = {}
        self._page: list[Record] = []

    def seen(self, page: list[Record]) -> None:
        """``page`` is folded next."""
        self._page = page

    def key(self, key_id: str) -> bytes | None:
        if key_id not in self._known:
            wanted = {k for _, _, data in self._page for k in sealed_key_ids(data)}
            self._ask((wanted | {key_id}) - self._known.keys())
        return self._known[key_id]

    def _ask(self, wanted: set[str]) -> None:
        pickle.dump(wanted, self._asks, pickle.HIGHEST_PROTOCOL)
        self._asks.flush()
        answer = _read(self._answers)
        if isinstance(answer, str):
            raise WorkerFailed(f"the rebuild could not look up subject keys: {answer}")
        self._known.update(answer)


def _read(stream: IO[bytes]) -> Any:
    # Only ever a pipe between the rebuild and the worker it started.
    return pickle.load(stream)  # noqa: S301


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
    # Done and answered: skip the interpreter's teardown, which would free (and first
    # collect) every object of the fold while the rebuild waits for this process to end.
    os._exit(0)

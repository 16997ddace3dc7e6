"""``VectorIndex`` on Qdrant Edge in a process of its own, serving the shard over a socket.

Every Edge call holds the GIL. In an API process that froze every request meanwhile (ADR 0006).
Here the shard lives in a process of its own, which its owner (the vectors service) starts;
callers only wait on a socket (without the GIL); and the shard's HNSW graph is built aside, in
a builder process of its own, so a build holds up not even the calls to the index
(``aside``, ADR 0022). Several processes reach it at once: its owner, which writes,
and any number of readers (``remote.SocketVectorIndex``: the query processes).

The index process opens the shard, serves it on a Unix socket in the data directory (``wire``:
its owner's only), then answers ``("ok", None)`` on its stdout (or ``("error", exception)``
if the shard could not be opened). Its stdin is its owner's lifeline: the process closes the
shard (flushing it) and exits when its stdin ends, on SIGTERM, and when its owner dies; unless
its owner said goodbye first, it is given ``ORPHAN_GRACE_SECONDS`` for that. Each
connection's calls are answered in its own thread; the index orders them.
"""

import contextlib
import logging
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, NoReturn

from memledger_platform.vectorindex import wire
from memledger_platform.vectorindex.port import IndexReopened, IndexUnavailable, VectorIndex
from memledger_platform.vectorindex.remote import ForwardedVectorIndex

log = logging.getLogger(__name__)

RESTART_SECONDS = 5.0
ORPHAN_GRACE_SECONDS = 10
"""How long an index whose owner died may take to close its shard before the kernel ends it."""
_GOODBYE = b"."
"""What an owner writes on the lifeline before it ends it: this stop is the owner's own."""
_READS = frozenset({"search", "search_sparse", "search_both", "vectors", "payloads"})
"""Calls that may follow a restart without ``IndexReopened``: they write nothing."""


class VectorProcessEnded(IndexUnavailable):
    """The index's process is gone (it crashed, was killed, or the index was closed)."""


class ProcessVectorIndex(ForwardedVectorIndex):
    """A Qdrant Edge shard at ``path`` (``dims`` dimensions) served by a child process at
    ``address`` (default: ``<path>.sock`` beside the shard). Opening waits until the shard is
    open and served, and raises what stopped it if it could not be.

    A call after the process died starts it again (the shard reopens from its files), as does
    ``ensure_running``: a search is answered, and the next call of a writer raises
    ``IndexReopened`` once, since what was written after the last flush may be gone."""

    def __init__(self, path: Path, dims: int, *, address: Path | None = None,
                 log_level: str = "info", log_format: str = "auto") -> None:
        self.address = address or path.with_name(path.name + ".sock")
        self._argv = [sys.executable, "-m", __name__, str(path), str(dims), log_level,
                      log_format, str(self.address)]
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._closed = False
        self._reopened = False
        self._start()

    def ensure_running(self) -> None:
        """Start the process again if it died (at most once per ``RESTART_SECONDS``), so that
        readers find it served although this owner makes no call."""
        with self._lock:
            if not self._closed and self._process.poll() is not None:
                self._restart()

    def close(self) -> None:
        """Close the shard (flushing it) and wait for the process to exit; closing twice, or
        after the process died, is harmless."""
        with self._lock:
            self._closed = True
            self._end()

    def _start(self) -> None:
        from memledger_platform.engines.process import parent_death_preexec

        # Popen returns right after fork/exec; the preexec only calls prctl and getppid.
        self._process = subprocess.Popen(
            self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            preexec_fn=parent_death_preexec(signal.SIGTERM))  # noqa: PLW1509
        self._started = time.monotonic()
        try:
            assert self._process.stdout is not None
            kind, value = _read(self._process.stdout)  # the shard is open and served
        except (EOFError, OSError) as error:
            self._end()
            raise self._ended() from error
        except BaseException:
            self._end()
            raise
        if kind == "error":
            self._end()
            raise value

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            if self._closed:
                raise VectorProcessEnded("the vector index was closed")
            if self._process.poll() is not None:
                self._restart()
            if self._reopened and method not in _READS:
                self._reopened = False
                raise IndexReopened("the vector index process was restarted: writes since "
                                    "the last flush may be lost")
            return self._exchange(method, args)

    def _restart(self) -> None:
        """Start the process again after it died, at most once per ``RESTART_SECONDS`` (a
        shard that cannot open would otherwise be retried by every call)."""
        if time.monotonic() - self._started < RESTART_SECONDS:
            raise self._ended()
        log.warning("the vector index process ended (exit code %s): starting it again",
                    self._process.poll())
        self._end()
        self._start()
        self._reopened = True

    def _exchange(self, method: str, args: tuple[Any, ...]) -> Any:
        """One call; with the lock held. A connection left half-way (the process died, or this
        thread was interrupted) is never read again: its next answer could be this call's.
        The next call gets a new one (from a new process if this one is gone)."""
        try:
            if self._sock is None:
                self._sock = wire.connect(self.address)
            wire.send(self._sock, (method, args))
            kind, value = wire.receive(self._sock)
        except (EOFError, OSError) as error:
            self._drop()
            raise self._ended() from error
        except BaseException:
            self._drop()
            raise
        if kind == "error":
            raise value
        return value

    def _ended(self) -> VectorProcessEnded:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=1)  # a connection ends just before its process
        code = self._process.poll()
        return VectorProcessEnded("the vector index process has ended" + (
            f" (exit code {code})" if code is not None else ""))

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _end(self) -> None:
        """Stop the process: its stdin ends, so it closes the shard (after the call under way)
        and exits."""
        self._drop()
        if self._process.stdin is not None and not self._process.stdin.closed:
            with contextlib.suppress(OSError):  # a process already gone reads no goodbye
                self._process.stdin.write(_GOODBYE)
                self._process.stdin.flush()
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log.error("the vector index process did not stop within 60 s: killed")
            self._process.kill()
            self._process.wait()


# --- the index process -----------------------------------------------------------------------


class _Server:
    """Answers calls on every connection, each in its connection's thread, until stopped: the
    index orders them itself, and a read need not wait for a write held up by a build's copy."""

    def __init__(self, index: VectorIndex, listener: socket.socket) -> None:
        self._index = index
        self._listener = listener
        self._calls = threading.Condition()
        self._under_way = 0
        self._stopped = False

    def accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # the listener was closed: stopping
                return
            threading.Thread(target=self._serve, args=(conn,), name="index-connection",
                             daemon=True).start()

    def stop(self) -> None:
        """Take no more calls, and let those under way end first."""
        with self._calls:
            self._stopped = True
            self._listener.close()
            self._calls.wait_for(lambda: self._under_way == 0, timeout=60)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    method, args = wire.receive(conn)
                    wire.send(conn, self._answer(method, args))
                except (EOFError, OSError):
                    return

    def _answer(self, method: str, args: tuple[Any, ...]) -> tuple[str, Any]:
        if method not in wire.CALLS:
            return "error", ValueError(f"not a vector index call: {method!r}")
        with self._calls:
            if self._stopped:
                return "error", VectorProcessEnded("the vector index process is stopping")
            self._under_way += 1
        try:
            return "ok", getattr(self._index, method)(*args)
        except Exception as error:  # the caller's error, raised in the caller
            return "error", error
        finally:
            with self._calls:
                self._under_way -= 1
                self._calls.notify_all()


def _answer(answers: IO[bytes], kind: str, value: Any) -> None:
    try:
        message = pickle.dumps((kind, value), pickle.HIGHEST_PROTOCOL)
    except Exception:  # an exception that cannot be pickled: its text is the message
        message = pickle.dumps(("error", RuntimeError(repr(value))), pickle.HIGHEST_PROTOCOL)
    answers.write(message)
    answers.flush()


def _read(stream: IO[bytes]) -> Any:
    # Only ever the pipe between an index and the process that started it.
    return pickle.load(stream)  # noqa: S301


def _stop(signum: int, frame: object) -> NoReturn:
    raise SystemExit(0)


def main(argv: list[str]) -> int:
    from memledger_platform import logs
    from memledger_platform.vectorindex.aside import AsideVectorIndex

    path, dims, level, fmt, address = argv
    lifeline, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but the answer to opening may reach the pipe
    # Ctrl-C reaches the whole terminal group: the owner decides when this process stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)  # the owner died: close the shard, then exit
    logs.configure(level, "json" if fmt == "json" else "console" if fmt == "console" else "auto")
    try:
        index = AsideVectorIndex(Path(path), int(dims))
    except Exception as error:
        _answer(answers, "error", error)
        return 1
    try:
        server = _Server(index, wire.listen(Path(address)))
    except Exception as error:
        index.close()
        _answer(answers, "error", error)
        return 1
    told = False
    try:
        threading.Thread(target=server.accept, name="index-listener", daemon=True).start()
        _answer(answers, "ok", None)
        while chunk := lifeline.read(1):  # until the owner closes it (or dies)
            told = chunk == _GOODBYE
    finally:
        if not told:
            _bound_close()
        server.stop()
        index.close()
        Path(address).unlink(missing_ok=True)
    return 0


def _bound_close() -> None:
    """With its owner dead (the lifeline ended without a goodbye, or the parent-death
    SIGTERM), nobody waits for the flush, and a graph build under way (holding the GIL, so no
    Python thread can step in) kept an orphan busy for many minutes over a deleted folder:
    SIGALRM's default action ends the process from the kernel. A shard cut short reopens
    from its files, as after a kill -9; the owner bounds its own close (``_end``)."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(ORPHAN_GRACE_SECONDS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

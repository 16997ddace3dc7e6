"""``VectorIndex`` on Qdrant Edge in a process of its own, so the engine's pauses stay there.

Every Edge call holds the GIL, and ``optimize`` (an HNSW build) holds it for as long as it
runs: 11 s for 20,000 fresh points on 2 cores. In the API process that froze ingest, every
read and the change feed meanwhile (ADR 0006). Here the shard lives in a child process; this
process only waits on a pipe (without the GIL), so a build holds up nothing but the calls to
the index itself, and its CPU is no longer the API process's.

Protocol, pickled over the child's stdin and stdout: the child first answers ``("ok",
None)`` once the shard is open (or ``("error", exception)``); then each call ``(method,
args)`` is answered by ``("ok", result)`` or ``("error", exception)``. Calls are taken one at
a time (the engine runs one at a time anyway). The child closes the shard (flushing it) and
exits when its stdin ends, when asked to ``close``, on SIGTERM, and when this process dies.
"""

import contextlib
import logging
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from memledger_platform.vectorindex.port import (
    Hit,
    IndexedPoint,
    IndexReopened,
    IndexUnavailable,
    Scope,
    SparseVector,
    VectorIndex,
)

log = logging.getLogger(__name__)

RESTART_SECONDS = 5.0
_READS = frozenset({"search", "search_sparse", "vectors"})
"""Calls that may follow a restart without ``IndexReopened``: they write nothing."""
_CALLS = frozenset({"upsert", "delete", "search", "search_sparse", "vectors", "points",
                    "session_messages", "delete_subject", "count", "flush", "optimize"})


class VectorProcessEnded(IndexUnavailable):
    """The index's process is gone (it crashed, was killed, or the index was closed)."""


class ProcessVectorIndex(VectorIndex):
    """A Qdrant Edge shard at ``path`` (``dims`` dimensions) served by a child process.
    Opening waits until the shard is open, and raises what stopped it if it could not be.

    A call after the process died starts it again (the shard reopens from its files): a
    search is answered, and the next call of a writer raises ``IndexReopened`` once, since
    what was written after the last flush may be gone."""

    def __init__(self, path: Path, dims: int, *, log_level: str = "info",
                 log_format: str = "auto") -> None:
        self._argv = [sys.executable, "-m", __name__, str(path), str(dims), log_level,
                      log_format]
        self._lock = threading.Lock()
        self._closed = False
        self._reopened = False
        self._start()

    def upsert(self, points: Sequence[IndexedPoint]) -> None:
        if points:
            self._call("upsert", list(points))

    def delete(self, point_ids: Sequence[str]) -> None:
        if point_ids:
            self._call("delete", list(point_ids))

    def search(self, vector: Sequence[float], scope: Scope, k: int) -> list[Hit]:
        found: list[Hit] = self._call("search", list(vector), scope, k)
        return found

    def search_sparse(self, query: SparseVector, scope: Scope, k: int) -> list[Hit]:
        found: list[Hit] = self._call("search_sparse", query, scope, k)
        return found

    def vectors(self, point_ids: Sequence[str]) -> dict[str, list[float]]:
        if not point_ids:
            return {}
        found: dict[str, list[float]] = self._call("vectors", list(point_ids))
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

    def flush(self) -> None:
        self._call("flush")

    def optimize(self) -> None:
        self._call("optimize")

    def close(self) -> None:
        """Close the shard (flushing it) and wait for the process to exit; closing twice, or
        after the process died, is harmless."""
        with self._lock:
            self._closed = True
            if not self._broken:
                with contextlib.suppress(VectorProcessEnded):
                    self._exchange(("close", ()))
            self._end()

    def _start(self) -> None:
        from memledger_platform.engines.process import parent_death_preexec

        # Popen returns right after fork/exec; the preexec only calls prctl and getppid.
        self._process = subprocess.Popen(
            self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            preexec_fn=parent_death_preexec(signal.SIGTERM))  # noqa: PLW1509
        self._started = time.monotonic()
        self._broken = False
        try:
            self._exchange(None)  # the shard is open
        except BaseException:
            self._end()
            raise

    def _call(self, method: str, *args: Any) -> Any:
        with self._lock:
            if self._broken and not self._closed:
                self._restart()
            if self._reopened and method not in _READS:
                self._reopened = False
                raise IndexReopened("the vector index process was restarted: writes since "
                                    "the last flush may be lost")
            return self._exchange((method, args))

    def _restart(self) -> None:
        """Start the process again after it died, at most once per ``RESTART_SECONDS`` (a
        shard that cannot open would otherwise be retried by every call)."""
        if time.monotonic() - self._started < RESTART_SECONDS:
            raise self._ended()
        log.warning("the vector index process ended (exit code %s): starting it again",
                    self._process.poll())
        self._end()  # one left half-way in a call, alive, lets go of the shard first
        self._start()
        self._reopened = True

    def _exchange(self, request: tuple[str, tuple[Any, ...]] | None) -> Any:
        """Send ``request`` (``None``: only read the answer to opening) and return its answer;
        with the lock held. A pipe left half-way (the process died, or this thread was
        interrupted) is never read again: the next answer could be this one's."""
        if self._broken:
            raise self._ended()
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None
        assert stdout is not None
        try:
            if request is not None:
                pickle.dump(request, stdin, pickle.HIGHEST_PROTOCOL)
                stdin.flush()
            kind, value = _read(stdout)
        except (EOFError, OSError) as error:
            self._broken = True
            raise self._ended() from error
        except BaseException:
            self._broken = True
            raise
        if kind == "error":
            raise value
        return value

    def _ended(self) -> VectorProcessEnded:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=1)  # a pipe ends just before its process
        code = self._process.poll()
        return VectorProcessEnded("the vector index process has ended" + (
            f" (exit code {code})" if code is not None else ""))

    def _end(self) -> None:
        self._broken = True
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                # a request still buffered for a process that is gone cannot be flushed
                with contextlib.suppress(OSError):
                    stream.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log.error("the vector index process did not stop within 60 s: killed")
            self._process.kill()
            self._process.wait()


# --- the child ---------------------------------------------------------------------------


def _serve(index: VectorIndex, requests: IO[bytes], answers: IO[bytes]) -> None:
    """Answer calls until the parent closes the pipe or asks to ``close``."""
    while True:
        try:
            method, args = _read(requests)
        except EOFError:
            return
        if method == "close":
            index.close()
            _answer(answers, "ok", None)
            return
        if method not in _CALLS:
            _answer(answers, "error", ValueError(f"not a vector index call: {method!r}"))
            continue
        try:
            result = getattr(index, method)(*args)
        except Exception as error:  # the caller's error, raised in the caller
            _answer(answers, "error", error)
        else:
            _answer(answers, "ok", result)


def _answer(answers: IO[bytes], kind: str, value: Any) -> None:
    try:
        message = pickle.dumps((kind, value), pickle.HIGHEST_PROTOCOL)
    except Exception:  # an exception that cannot be pickled: its text is the message
        message = pickle.dumps(("error", RuntimeError(repr(value))), pickle.HIGHEST_PROTOCOL)
    answers.write(message)
    answers.flush()


def _read(stream: IO[bytes]) -> Any:
    # Only ever the pipe between an index and the process it started.
    return pickle.load(stream)  # noqa: S301


def _stop(signum: int, frame: object) -> NoReturn:
    raise SystemExit(0)


def main(argv: list[str]) -> int:
    from memledger_platform import logs
    from memledger_platform.vectorindex.qdrant_edge import QdrantEdgeVectorIndex

    path, dims, level, fmt = argv
    requests, answers = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but answers may reach the pipe
    # Ctrl-C reaches the whole terminal group: the parent decides when this process stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)  # the parent died: close the shard, then exit
    logs.configure(level, "json" if fmt == "json" else "console" if fmt == "console" else "auto")
    try:
        index = QdrantEdgeVectorIndex(Path(path), int(dims))
    except Exception as error:
        _answer(answers, "error", error)
        return 1
    try:
        _answer(answers, "ok", None)
        _serve(index, requests, answers)
    finally:
        index.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

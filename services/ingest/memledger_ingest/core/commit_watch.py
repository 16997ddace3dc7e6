"""The writer's commit deadline, watched from a thread of its own.

A commit attempt still in flight past its deadline has its callers failed at once with
``CommitTimedOut`` (retryable), and the store is interrupted so that the writer thread gets an
error back and goes on with the next group on a fresh connection. Whatever holds a commit up (a
lock another client keeps, a server that stopped answering, a client library waiting on the
wrong thing), one stuck commit then never holds every later write of every tenant.
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Fail = Callable[[BaseException], None]

COMMIT_TIMEOUT_SETTING = "MEMLEDGER_WRITER_COMMIT_TIMEOUT_SECONDS"


class CommitTimedOut(Exception):
    """A commit ran past its deadline and was given up on. It may or may not have been applied
    (it may have been committing when it was given up): a retry with the same idempotency key
    is safe either way."""

    retry_after_seconds = 1.0


class WriterStopping(Exception):
    """The service stopped before this submission was committed (or, if its commit was under
    way, it may have been): a retry with the same idempotency key is safe either way."""

    retry_after_seconds = 1.0


@dataclass
class _Attempt:
    started: float
    fail: Fail
    settled: bool = False


class CommitWatch:
    """Times the writer's commit attempts (``begin``, ``end``: one at a time, from the writer
    thread). ``interrupt`` is called, from the watch's thread, on an attempt past its deadline
    and must make it return soon."""

    def __init__(self, timeout_seconds: float, interrupt: Callable[[], None], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_seconds = timeout_seconds
        self.timed_out = 0
        self._interrupt = interrupt
        self._clock = clock
        self._attempt: _Attempt | None = None
        self._stopping = False
        # Held while an overdue attempt is failed and interrupted, so that ``end`` waits for
        # that: the interrupt can then never reach the writer's next attempt.
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="memledger-commit-watch",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._thread, thread = None, self._thread
        if thread is not None:
            self._wake.set()
            thread.join()

    def begin(self, fail: Fail) -> None:
        """An attempt starts; ``fail`` fails its callers."""
        with self._lock:
            self._attempt = _Attempt(self._clock(), fail)

    def end(self) -> None:
        with self._lock:
            self._attempt = None

    def raise_if_given_up(self) -> None:
        """Raise ``CommitTimedOut`` if the attempt in flight was given up on: called before
        the commit itself, so that one given up on between two calls to the store never
        commits after its callers were told otherwise."""
        attempt = self._attempt
        if attempt is not None and attempt.settled:
            raise CommitTimedOut("given up on before its commit")

    def stuck_seconds(self) -> float | None:
        """How long the attempt in flight has been running, if past its deadline."""
        attempt = self._attempt
        if attempt is None:
            return None
        running = self._clock() - attempt.started
        return running if running > self.timeout_seconds else None

    def stopping(self) -> None:
        """Give up on the attempt in flight now, with ``WriterStopping``."""
        self._stopping = True
        self._wake.set()

    def check(self) -> None:
        """Fail and interrupt the attempt in flight if it is overdue (or the writer is
        stopping); what the watch's thread does every so often."""
        with self._lock:
            attempt = self._attempt
            if attempt is None or attempt.settled:
                return
            error = self._overdue(attempt)
            if error is None:
                return
            attempt.settled = True
            # Interrupted first, answered after: a caller told that its commit was given up
            # on then finds it stopped (unless it was committing when the interrupt came).
            self._interrupt()
            attempt.fail(error)

    def _overdue(self, attempt: _Attempt) -> Exception | None:
        if self._stopping:
            return WriterStopping("the service is stopping and gave up on this commit; it may "
                                  "or may not have been applied")
        if self._clock() - attempt.started <= self.timeout_seconds:
            return None
        self.timed_out += 1
        return CommitTimedOut(
            f"the commit did not finish within {self.timeout_seconds:g} s "
            f"({COMMIT_TIMEOUT_SETTING}) and was given up on; it may or may not have been "
            "applied: retry with the same idempotency_key")

    def _run(self) -> None:
        interval = min(1.0, self.timeout_seconds / 4)
        while self._thread is not None:
            self._wake.wait(interval)
            self._wake.clear()
            self.check()

"""Process lifecycle: run a service until SIGINT/SIGTERM, then stop it gracefully."""

import asyncio
import contextlib
import gc
import os
import select
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")

STUCK_EXIT_CODE = 70  # EX_SOFTWARE: the service was ended, it did not finish on its own

# The writer thread wakes from a database round trip and then needs the GIL back from the busy
# event loop thread: shorter waits for it than the default 5 ms, without hand-offs that cost
# more than they save (ADR 0003).
SWITCH_INTERVAL_SECONDS = 0.002

# How many container objects may be allocated (net) before a young collection (Python's
# default is 700): a busy service's young objects are mostly alive (batches, vectors as lists
# of floats), so frequent collections walk them for little garbage (ADR 0003). The older
# generations keep their thresholds (counted in young collections).
GC_YOUNG_THRESHOLD = 50_000


def run_service(main: Coroutine[Any, Any, T]) -> T:
    """Run a service's coroutine on uvloop with a GIL switch interval suited to a writer thread
    that waits on the database while the event loop serves requests.

    Everything allocated until now (imported modules, mostly) is moved out of the garbage
    collector's sight with ``gc.freeze()``: those objects live as long as the process, and a
    full collection walking them stalls every thread for tens of milliseconds. From then on
    the collector runs less often (``GC_YOUNG_THRESHOLD``)."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def run_until_signalled(main: Callable[[asyncio.Event], Awaitable[None]], *,
                              grace_seconds: float | None = None) -> None:
    """Run ``main(stop)``; the first SIGINT or SIGTERM sets ``stop``.

    With ``grace_seconds``, a service that has not finished that long after the signal is
    ended at once (exit code 70). Stopping waits on the engines: a last flush to NATS or a
    commit to PostgreSQL. When they are gone (a ``memledger up`` killed with -9 takes its
    engines with it, and its children get SIGTERM) those waits never end, and the orphan would
    outlive everything. Ending it loses nothing: what it had not acked is redelivered."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def signalled() -> None:
        if grace_seconds is not None and not stop.is_set():
            _end_if_stuck(grace_seconds)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, signalled)
    try:
        await main(stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _end_if_stuck(grace_seconds: float) -> None:
    # A thread, not a task: the stop can also hang outside the event loop, in the interpreter's
    # wait for worker threads still blocked in a database call, or in a log line written to a
    # pipe nobody reads any more. So the farewell bypasses logging (its lock may be held by
    # that write) and is only written if it cannot block.
    def end() -> None:
        _say(f"memledger: {' '.join(sys.argv[1:]) or 'service'} did not stop within "
             f"{grace_seconds:g} s of the signal (MEMLEDGER_STOP_GRACE_SECONDS); ending now\n")
        os._exit(STUCK_EXIT_CODE)

    timer = threading.Timer(grace_seconds, end)
    timer.daemon = True
    timer.start()


def _say(line: str) -> None:
    fd = sys.stderr.fileno()
    with contextlib.suppress(OSError, ValueError):
        if select.select([], [fd], [], 0)[1]:  # room for a short (atomic) write
            os.write(fd, line.encode()[: select.PIPE_BUF])

"""Process lifecycle: run a service until SIGINT/SIGTERM, then stop it gracefully."""

import asyncio
import gc
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")

# The writer thread wakes from a database round trip and then needs the GIL back from the busy
# event loop thread. 2 ms measured best here (0.5 ms: more hand-offs; 5 ms: longer waits).
SWITCH_INTERVAL_SECONDS = 0.002


def run_service(main: Coroutine[Any, Any, T]) -> T:
    """Run a service's coroutine on uvloop with a GIL switch interval suited to a writer thread
    that waits on the database while the event loop serves requests.

    Everything allocated until now (imported modules, mostly) is moved out of the garbage
    collector's sight with ``gc.freeze()``: those objects live as long as the process, and a
    full collection walking them stalls every thread for tens of milliseconds."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    gc.collect()
    gc.freeze()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def run_until_signalled(main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``main(stop)``; the first SIGINT or SIGTERM sets ``stop``."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await main(stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

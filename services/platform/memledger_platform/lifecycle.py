"""Process lifecycle: run a service until SIGINT/SIGTERM, then stop it gracefully."""

import asyncio
import signal
from collections.abc import Awaitable, Callable


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

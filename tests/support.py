"""Helpers shared by the test tiers."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(check: Callable[[], Awaitable[T]], timeout: float = 10.0,  # noqa: ASYNC109
                     interval: float = 0.05) -> T:
    """Poll ``check`` until it returns without raising (an AssertionError means not yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await asyncio.sleep(interval)


def eventually_sync(check: Callable[[], T], timeout: float = 10.0, interval: float = 0.05) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(interval)

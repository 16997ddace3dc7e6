"""Helpers shared by the test tiers."""

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import orjson
from nats.js import JetStreamContext

from memledger_schemas.subjects import Subjects

T = TypeVar("T")

_probes = threading.local()

FAULT_TABLE = "fault injection table"
"""The name of a test's user property that holds a fault run's results table."""


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
    """``eventually`` for a check that is not a coroutine (a thread of its own may run it)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(interval)


def probe() -> httpx.Client:
    """This thread's HTTP client for polls (timeout 10 s unless a request says otherwise):
    ``httpx.get`` makes a new client each call, ~20 ms of CPU (it loads the CA bundle), which
    a poll every 50 ms takes from the services it waits for."""
    client: httpx.Client | None = getattr(_probes, "client", None)
    if client is None:
        client = _probes.client = httpx.Client(timeout=10)
    return client


def holds(check: Callable[[], Awaitable[T | None]], what: str = ""
          ) -> Callable[[], Awaitable[T]]:
    """``check`` as an ``eventually`` check when it answers rather than asserts: a result that
    is not true (``False``, ``None``, an empty list) means not yet; ``what`` is the message
    when it never holds."""
    async def asserted() -> T:
        found = await check()
        assert found, what or _answered(check, found)
        return found

    return asserted


def holds_sync(check: Callable[[], T | None], what: str = "") -> Callable[[], T]:
    """``holds`` for ``eventually_sync``."""
    def asserted() -> T:
        found = check()
        assert found, what or _answered(check, found)
        return found

    return asserted


def _answered(check: Callable[..., object], found: object) -> str:
    return f"{getattr(check, '__name__', 'the check')} answered {found!r}"


def large_batch(size: int, space: str, content: int = 65_536) -> bytes:
    """A batch body of memories of ``content`` characters in ``space``, ``size`` bytes to the
    byte: as many commands as fit, then JSON whitespace."""
    command = {"command": "assert_memory", "space_id": space, "kind": "fact",
               "content": "x" * content}
    one = len(orjson.dumps(command)) + 1
    body = orjson.dumps({"commands": [command] * ((size - 64) // one)})
    assert len(body) <= size
    return body + b" " * (size - len(body))


def flat_routes(routes: list[Any]) -> list[Any]:
    """An app's routes, with those of the routers it includes among them (FastAPI keeps an
    included router apart, as one entry)."""
    found = []
    for route in routes:
        inner = getattr(route, "original_router", None)
        found += flat_routes(list(inner.routes)) if inner is not None else [route]
    return found


async def delete_streams(js: JetStreamContext, subjects: Subjects) -> None:
    """Delete a test's streams: each partition's events, intake, dead letters (one already
    gone, or never made, is fine)."""
    for name in (*(p.events_stream for p in subjects.every_partition()),
                 subjects.intake_stream, subjects.dead_letter_stream):
        with contextlib.suppress(Exception):
            await js.delete_stream(name)

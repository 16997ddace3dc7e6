"""Limits on what one request, and one tenant, may ask: body size, time, and rate.

- ``RequestLimits`` (ASGI middleware): a body larger than ``max_body_bytes`` is refused with 413
  before it is read in full; a request not answered within ``timeout_seconds`` gets 504. A
  write the timeout cut short is still committed if it was accepted: a retry with the same
  idempotency key returns its result (nothing accepted is lost, nothing is applied twice).
- ``RateLimiter``: a token bucket per tenant; an empty bucket means 429 with ``Retry-After``.
"""

import asyncio
import math
import threading
import time
from collections.abc import Callable

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RateLimiter:
    """``rate`` requests per second per tenant, bursts up to ``burst``."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self._rate, self._burst, self._clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()  # the gate runs in worker threads too

    def wait(self, tenant: str) -> float:
        """Take one token: 0.0 if there was one, else the seconds until there will be."""
        now = self._clock()
        with self._lock:
            tokens, then = self._buckets.get(tenant, (self._burst, now))
            tokens = min(self._burst, tokens + (now - then) * self._rate)
            if tokens >= 1.0:
                self._buckets[tenant] = (tokens - 1.0, now)
                return 0.0
            self._buckets[tenant] = (tokens, now)
            return (1.0 - tokens) / self._rate


class RequestLimits:
    def __init__(self, app: ASGIApp, *, max_body_bytes: int, timeout_seconds: float) -> None:
        self._app = app
        self._max = max_body_bytes
        self._timeout = timeout_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self._max:
            await _problem(send, 413, "too_large", f"the body is {declared} bytes; at most "
                           f"{self._max} are accepted (MEMLEDGER_HTTP_MAX_BODY_BYTES)", "body")
            return
        started = False

        async def counting_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await asyncio.wait_for(self._app(scope, self._counted(receive), counting_send),
                                   self._timeout)
        except _TooLarge:
            if not started:
                await _problem(send, 413, "too_large", f"the body exceeds {self._max} bytes "
                               "(MEMLEDGER_HTTP_MAX_BODY_BYTES)", "body")
        except TimeoutError:
            if not started:
                await _problem(send, 504, "timeout", f"no answer within {self._timeout:g} s; a "
                               "write may still commit: retry with the same idempotency key",
                               None)

    def _counted(self, receive: Receive) -> Receive:
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self._max:
                raise _TooLarge
            return message

        return counted


class _TooLarge(Exception):
    pass


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _problem(send: Send, status: int, code: str, message: str, path: str | None,
                   headers: list[tuple[bytes, bytes]] | None = None) -> None:
    fields = [{"path": path, "reason": message}] if path else []
    body = orjson.dumps({"error": {"status": status, "code": code, "message": message,
                                   "fields": fields}})
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def retry_after(seconds: float) -> str:
    return str(max(1, math.ceil(seconds)))

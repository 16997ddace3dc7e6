"""Limits on what one request, and one caller, may ask: body size, time, and rate.

- ``RequestLimits`` (ASGI middleware): a body larger than ``max_body_bytes`` is refused with 413
  before it is read in full; a request not answered within ``timeout_seconds`` gets 504. A
  write the timeout cut short is still committed if it was accepted: a retry with the same
  idempotency key returns its result (nothing accepted is lost, nothing is applied twice).
- ``RateLimiter``: a token bucket per name; ``RateLimits``: the buckets a request is held to
  (its tenant's, its API key's, and for a request without a valid key its client address's).
  An empty bucket means 429 with ``Retry-After``.
"""

import asyncio
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class RateLimiter:
    """``rate`` requests per second per name (a tenant, a key, an address), bursts up to
    ``burst``. A bucket that is full again is forgotten, so idle names cost no memory."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
                 ) -> None:
        self.rate, self.burst, self._clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()  # the gate runs in worker threads too

    def wait(self, name: str) -> float:
        """Take one token: 0.0 if there was one, else the seconds until there will be."""
        with self._lock:
            tokens, now = self._refilled(name)
            if tokens >= 1.0:
                self._buckets[name] = (tokens - 1.0, now)
                return 0.0
            self._buckets[name] = (tokens, now)
            return (1.0 - tokens) / self.rate

    def pending(self, name: str) -> float:
        """The seconds until ``name`` has a token (0.0: it has one now); takes nothing."""
        with self._lock:
            tokens, _ = self._refilled(name)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.rate

    def _refilled(self, name: str) -> tuple[float, float]:
        now = self._clock()
        tokens, then = self._buckets.get(name, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens >= self.burst:
            self._buckets.pop(name, None)
        return tokens, now


LimitScope = Literal["tenant", "key", "address"]


@dataclass(frozen=True)
class Exceeded:
    """The limit in a request's way: whose, and the seconds until it has room."""

    scope: LimitScope
    name: str
    seconds: float


_Held = tuple[LimitScope, RateLimiter, str]


@dataclass(frozen=True)
class RateLimits:
    """The rates a request is held to, each off when ``None``: its tenant's and its API key's
    (both must have room, and a refused request takes from neither, so one key can use at most
    its own allowance of its tenant's), and, for a request without a valid API key, its client
    address's."""

    tenant: RateLimiter | None = None
    key: RateLimiter | None = None
    address: RateLimiter | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def admit(self, tenant: str, key_id: str | None) -> Exceeded | None:
        """Take one request from the tenant's and the key's allowance, or from neither if
        either is used up: then the one with the longer wait."""
        held = self._held(tenant, key_id)
        with self._lock:
            waits = [Exceeded(scope, name, limiter.pending(name)) for scope, limiter, name in held]
            worst = max(waits, key=lambda w: w.seconds, default=None)
            if worst is not None and worst.seconds > 0:
                return worst
            for _, limiter, name in held:
                limiter.wait(name)
        return None

    def _held(self, tenant: str, key_id: str | None) -> list[_Held]:
        held: list[_Held] = []
        if self.tenant is not None:
            held.append(("tenant", self.tenant, tenant))
        if self.key is not None and key_id is not None:
            held.append(("key", self.key, key_id))
        return held

    def address_blocked(self, address: str | None) -> Exceeded | None:
        """Whether ``address`` has used up its allowance of requests without a valid key."""
        if self.address is None or address is None:
            return None
        seconds = self.address.pending(address)
        return Exceeded("address", address, seconds) if seconds > 0 else None

    def failed(self, address: str | None) -> None:
        """A request from ``address`` carried no valid API key: it takes from its allowance."""
        if self.address is not None and address is not None:
            self.address.wait(address)


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
            # A deadline on this task rather than ``wait_for``'s task of its own per request.
            async with asyncio.timeout(self._timeout):
                await self._app(scope, self._counted(receive), counting_send)
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
    """A ``Retry-After`` value: whole seconds, at least 1 (a sooner retry would be refused)."""
    return str(max(1, math.ceil(seconds)))

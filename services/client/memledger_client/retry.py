"""When to try a request again, and after how long: pure, so the policy is tested without a
network or a clock.

Transient: no answer at all (connection refused or reset, timeouts), 429 (after its
``Retry-After``), 502, 503 and 504. Writes are retried too: each carries one idempotency key for
all its attempts, so a write that did commit before its answer was lost is not written again.
"""

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx

TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """``attempts`` in all (1: never retry); exponential backoff with full jitter, from
    ``backoff`` seconds up to ``max_backoff``; a server's ``Retry-After`` is honoured up to
    ``max_retry_after``."""

    attempts: int = 4
    backoff: float = 0.2
    max_backoff: float = 5.0
    max_retry_after: float = 60.0
    jitter: bool = True

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.backoff * 2 ** (attempt - 1), self.max_backoff)
        return random.uniform(0, ceiling) if self.jitter else ceiling  # noqa: S311

    def gives_up(self, attempt: int) -> bool:
        return attempt >= self.attempts


NO_RETRY = RetryPolicy(attempts=1)


def is_transient(response: httpx.Response) -> bool:
    return response.status_code in TRANSIENT_STATUSES


def retry_after(response: httpx.Response, now: datetime | None = None) -> float | None:
    """The ``Retry-After`` header in seconds (it may be a number or an HTTP date)."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)

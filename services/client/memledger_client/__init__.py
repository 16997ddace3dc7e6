"""The Python client of memledger: ``Client`` (blocking) and ``AsyncClient`` (asyncio), over
the HTTP API of ingest (writes) and query (reads, search, context).

- Every write: ``send(command)`` with any model of ``memledger_schemas.commands``, ``batch``,
  and typed shortcuts (``create_space``, ``assert_memory``, ``revise_memory``, ...).
- Idempotency: a command without ``idempotency_key`` gets a fresh one, the same for all the
  retries of that call, so a retried write is never written twice.
- Retries: connection failures and timeouts, 429 (after ``Retry-After``), 502, 503 and 504, with
  exponential backoff and jitter (``RetryPolicy``).
- Read-your-writes: reads send the highest ``position`` this client's writes returned as
  ``min_position`` (``read_your_writes=False`` on the client, or ``min_position=None`` on a call,
  to opt out).
- Tenant and key: ``tenant=`` (the ``X-Memledger-Tenant`` header), ``api_key=`` (sent as
  ``Authorization: Bearer``) where the server requires keys.
- Errors: ``MemledgerError`` and its subclasses, carrying the server's status, code, message and
  field paths.
- Degradation: a circuit breaker per endpoint group (writes, reads, recall): after 5 failures in
  a row its calls fail at once with ``CircuitOpen`` until a probe is let through 30 s later;
  recall (search, context) times out after 2 s. ``Resilience(stale=StaleCache())`` also keeps
  recent recall answers, and answers from them (``stale: true``, ``stale_age_seconds``) when
  memledger cannot.
"""

from memledger_client.async_client import AsyncClient
from memledger_client.calls import (
    AsOf,
    Consistency,
    ContextOptions,
    ItemFilters,
    SearchOptions,
    SessionFilters,
)
from memledger_client.core import DEFAULT_URL, TENANT_HEADER, Resilience
from memledger_client.degrade import BreakerPolicy, StaleCache
from memledger_client.errors import (
    CircuitOpen,
    Conflict,
    FieldError,
    Forbidden,
    InvalidRequest,
    MemledgerError,
    NotFound,
    NotYetVisible,
    RateLimited,
    Unauthorized,
    Unavailable,
    Unreachable,
)
from memledger_client.results import BatchResult, WriteResult
from memledger_client.retry import NO_RETRY, RetryPolicy
from memledger_client.sync_client import Client
from memledger_client.writes import CommandMeta

__all__ = [
    "DEFAULT_URL", "NO_RETRY", "TENANT_HEADER", "AsOf", "AsyncClient", "BatchResult",
    "BreakerPolicy", "CircuitOpen", "Client", "CommandMeta", "Conflict", "Consistency",
    "ContextOptions", "FieldError", "Forbidden", "InvalidRequest", "ItemFilters", "MemledgerError",
    "NotFound", "NotYetVisible", "RateLimited", "Resilience", "RetryPolicy", "SearchOptions",
    "SessionFilters", "StaleCache", "Unauthorized", "Unavailable", "Unreachable", "WriteResult",
]

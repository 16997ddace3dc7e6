"""What the sync and async clients share besides the calls: building a request (tenant,
read-your-writes), admitting it past its circuit breaker, judging an answer (done, retry after
a delay, or fail), reading it, and standing in with a stale answer when memledger cannot give
one.

State: ``position`` (the highest global position this client's writes returned), the breakers
and the recall cache.
"""

import threading
import time
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast, get_args

import httpx
import orjson
from pydantic import BaseModel

from memledger_client.calls import Call
from memledger_client.degrade import (
    BreakerPolicy,
    CircuitBreaker,
    Clock,
    Group,
    RecallCache,
    StaleCache,
    recall_key,
)
from memledger_client.errors import (
    CircuitOpen,
    MemledgerError,
    Unavailable,
    Unreachable,
    from_response,
)
from memledger_client.results import BatchResult, WriteResult
from memledger_client.retry import RetryPolicy, is_transient, retry_after

T = TypeVar("T")
TENANT_HEADER = "X-Memledger-Tenant"
DEFAULT_URL = "http://127.0.0.1:8420"
USER_AGENT = "memledger-client/0.1"
_SERVER_WAIT_SECONDS = 2.0
"""How long the server waits for ``min_position`` when a request names no ``wait_ms``."""


@dataclass(frozen=True)
class Resilience:
    """How a client degrades: ``breaker`` None turns the breakers off; ``stale`` None keeps no
    recall answers; ``clock`` (monotonic seconds) is for tests."""

    breaker: BreakerPolicy | None = field(default_factory=BreakerPolicy)
    stale: StaleCache | None = None
    clock: Clock | None = None


class Core:
    def __init__(self, base_url: str, tenant: str | None, retry: RetryPolicy,
                 read_your_writes: bool, resilience: Resilience) -> None:
        self.base_url = base_url.rstrip("/")
        self.tenant = tenant
        self.retry = retry
        self.read_your_writes = read_your_writes
        self._position = 0
        self._lock = threading.Lock()
        clock = resilience.clock or time.monotonic
        self._policy = resilience.breaker
        self._breakers = {group: CircuitBreaker(self._policy, clock)
                          for group in get_args(Group)} if self._policy else {}
        self._cache = RecallCache(resilience.stale, clock) if resilience.stale else None

    def breaker_state(self, group: Group) -> str:
        """``closed``, ``open`` or ``half-open`` (``off`` without breakers)."""
        breaker = self._breakers.get(group)
        return breaker.state if breaker else "off"

    @property
    def position(self) -> int:
        return self._position

    def observe(self, position: int) -> None:
        with self._lock:
            self._position = max(self._position, position)

    def headers(self, api_key: str | None, extra: dict[str, str] | None) -> dict[str, str]:
        tenant = {TENANT_HEADER: self.tenant} if self.tenant else {}
        key = {"authorization": f"Bearer {api_key}"} if api_key else {}
        return {"user-agent": USER_AGENT, **tenant, **key, **(extra or {})}

    def build(self, http: httpx.Client | httpx.AsyncClient, call: Call[Any]) -> httpx.Request:
        params, body = dict(call.params), None if call.body is None else dict(call.body)
        if call.ryw and self.read_your_writes and self._position > 0:
            target = params if call.ryw == "query" or body is None else body
            target["min_position"] = self._position
        request = http.build_request(
            call.method, call.path, params=params or None,
            content=None if body is None else orjson.dumps(body),
            headers={"content-type": "application/json"} if body else None)
        timeout = self._timeout(call, body)
        if timeout is not None:
            request.extensions["timeout"] = httpx.Timeout(timeout).as_dict()
        return request

    def _timeout(self, call: Call[Any], body: dict[str, Any] | None) -> float | None:
        """Recall's own timeout, plus the time the server may wait for ``min_position``."""
        if self._policy is None or not call.recall:
            return None
        wait = 0.0
        if body is not None and body.get("min_position") is not None:
            wait = float(body.get("wait_ms", _SERVER_WAIT_SECONDS * 1000)) / 1000
        return self._policy.recall_timeout_seconds + wait

    def admit(self, call: Call[Any]) -> None:
        """Raise ``CircuitOpen`` if the call's group is failing and not yet due a probe."""
        breaker = self._breakers.get(call.group)
        wait = breaker.admit() if breaker else None
        if wait is not None:
            raise CircuitOpen(None, "circuit_open", (
                f"{call.group} calls to {self.base_url} failed {self._policy_failures()} "
                f"times in a row; not sent (next try in {max(wait, 0.1):.1f} s)"),
                body={"retry_after": wait})

    def _policy_failures(self) -> int:
        return self._policy.failures if self._policy else 0

    def _record(self, call: Call[Any], ok: bool) -> None:
        breaker = self._breakers.get(call.group)
        if breaker is not None:
            (breaker.succeeded if ok else breaker.failed)()

    def after_error(self, error: httpx.TransportError, attempt: int, call: Call[Any]) -> float:
        """The delay before the next attempt; raises ``Unreachable`` when out of attempts (or
        at once for a URL no attempt can reach)."""
        self._record(call, ok=False)
        if self.retry.gives_up(attempt) or isinstance(error, httpx.UnsupportedProtocol):
            raise Unreachable(None, "unreachable", f"no answer from {self.base_url} after "
                              f"{attempt} attempt(s): {error!r}") from error
        return self.retry.delay(attempt)

    def after_response(self, response: httpx.Response, attempt: int, call: Call[Any]
                       ) -> float | None:
        """The delay before the next attempt, or None if this answer is final."""
        self._record(call, ok=response.status_code not in _SERVER_FAILURES)
        if not is_transient(response) or self.retry.gives_up(attempt):
            return None
        return self.retry.delay(attempt, retry_after(response))

    def finish(self, call: Call[T], response: httpx.Response) -> T:
        if response.status_code >= 400:
            raise from_response(response, retry_after(response))
        try:
            value = call.parse(orjson.loads(response.content))
        except (orjson.JSONDecodeError, ValueError) as error:
            raise MemledgerError(response.status_code, "unexpected_answer",
                                 f"{call.method} {call.path}: {error}") from error
        if isinstance(value, WriteResult | BatchResult):
            self.observe(value.position)
        if self._cache is not None and call.recall:
            self._cache.put(recall_key(call.path, dict(call.body or {})), value)
        return value

    def stale(self, call: Call[T], error: Unavailable) -> T:
        """The last answer to the same recall, marked ``stale`` with its age, standing in
        for one memledger cannot give now; re-raises ``error`` if there is none."""
        found = self._cache.get(recall_key(call.path, dict(call.body or {}))) if (
            self._cache is not None and call.recall) else None
        answer = found[0] if found is not None else None
        if found is None or not isinstance(answer, BaseModel):
            raise error
        age = found[1]
        stale = answer.model_copy(update={"stale": True, "stale_age_seconds": round(age, 3)})
        return cast(T, stale)  # the cache holds what ``call.parse`` returned for this call


_SERVER_FAILURES = frozenset({502, 503, 504})
"""Answers that count against a breaker (429 does not: the server is up, only busy)."""

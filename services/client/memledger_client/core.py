"""What the sync and async clients share besides the calls: building a request (tenant,
read-your-writes), judging an answer (done, retry after a delay, or fail) and reading it.

The only state is ``position``: the highest global position this client's writes returned.
"""

import threading
from typing import Any, TypeVar

import httpx
import orjson

from memledger_client.calls import Call
from memledger_client.errors import MemledgerError, Unreachable, from_response
from memledger_client.results import BatchResult, WriteResult
from memledger_client.retry import RetryPolicy, is_transient, retry_after

T = TypeVar("T")
TENANT_HEADER = "X-Memledger-Tenant"
DEFAULT_URL = "http://127.0.0.1:8420"
USER_AGENT = "memledger-client/0.1"


class Core:
    def __init__(self, base_url: str, tenant: str | None, retry: RetryPolicy,
                 read_your_writes: bool) -> None:
        self.base_url = base_url.rstrip("/")
        self.tenant = tenant
        self.retry = retry
        self.read_your_writes = read_your_writes
        self._position = 0
        self._lock = threading.Lock()

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
        return http.build_request(call.method, call.path, params=params or None,
                                  content=None if body is None else orjson.dumps(body),
                                  headers={"content-type": "application/json"} if body else None)

    def after_error(self, error: httpx.TransportError, attempt: int) -> float:
        """The delay before the next attempt; raises ``Unreachable`` when out of attempts (or
        at once for a URL no attempt can reach)."""
        if self.retry.gives_up(attempt) or isinstance(error, httpx.UnsupportedProtocol):
            raise Unreachable(None, "unreachable", f"no answer from {self.base_url} after "
                              f"{attempt} attempt(s): {error!r}") from error
        return self.retry.delay(attempt)

    def after_response(self, response: httpx.Response, attempt: int) -> float | None:
        """The delay before the next attempt, or None if this answer is final."""
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
        return value

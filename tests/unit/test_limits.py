"""Request limits: body size (413), time (504), and rates (429 with Retry-After) per tenant,
per API key and, for requests without a valid key, per client address."""

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router

from memledger_ingest.core.writer import GroupCommitWriter
from memledger_ingest.entrypoints.http import create_app
from memledger_platform.auth import Denied, Gate, MemoryKeyStore, issue
from memledger_platform.eventstore.memory import InMemoryEventStore
from memledger_platform.grpc_server import client_address, tenant_resolver
from memledger_platform.limits import RateLimiter, RateLimits, RequestLimits, retry_after
from memledger_platform.settings import SettingsError, load_settings


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_its_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    limiter = RateLimiter(rate=2.0, burst=3.0, clock=clock)
    assert [limiter.wait("acme") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.wait("acme") == pytest.approx(0.5)
    assert limiter.wait("globex") == 0.0  # every tenant has its own bucket
    clock.now = 0.5
    assert limiter.wait("acme") == 0.0
    assert retry_after(0.01) == "1"


def test_the_gate_refuses_an_empty_bucket_with_the_wait() -> None:
    gate = Gate(None, "default", RateLimits(tenant=RateLimiter(rate=1.0, burst=1.0,
                                                               clock=Clock())))
    gate.principal(None, None)
    with pytest.raises(Denied) as denied:
        gate.principal(None, None)
    assert denied.value.status == 429
    assert denied.value.retry_after == pytest.approx(1.0)


async def _echo(request: Request) -> Response:
    return JSONResponse({"bytes": len(await request.body())})


async def _slow(_: Request) -> Response:
    await asyncio.Event().wait()  # never answers: only the timeout ends the request
    return JSONResponse({})


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = RequestLimits(Router([Route("/echo", _echo, methods=["POST"]),
                                Route("/slow", _slow)]),
                        max_body_bytes=1_000, timeout_seconds=0.2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as found:
        yield found


async def test_a_body_within_the_limit_passes(client: httpx.AsyncClient) -> None:
    response = await client.post("/echo", content=b"x" * 1_000)
    assert response.json() == {"bytes": 1_000}


async def test_a_declared_oversized_body_is_413_naming_the_setting(client: httpx.AsyncClient
                                                                   ) -> None:
    response = await client.post("/echo", content=b"x" * 1_001)
    assert response.status_code == 413
    assert "MEMLEDGER_HTTP_MAX_BODY_BYTES" in response.json()["error"]["message"]


async def test_a_streamed_oversized_body_is_cut_off_with_413(client: httpx.AsyncClient) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"x" * 400

    response = await client.post("/echo", content=chunks())
    assert response.status_code == 413


async def test_a_request_over_time_is_504_saying_how_to_retry(client: httpx.AsyncClient) -> None:
    response = await client.get("/slow")
    assert response.status_code == 504
    assert "idempotency key" in response.json()["error"]["message"]


# --- per key, per client address, and how a refusal reads ------------------------------------

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def _bearer(token: str) -> str:
    return f"Bearer {token}"


@pytest.fixture
def keys() -> MemoryKeyStore:
    store = MemoryKeyStore()
    store.create_tenant("acme")
    return store


def _refused(call: Callable[[], object]) -> Denied:
    with pytest.raises(Denied) as denied:
        call()
    return denied.value


def test_one_key_cannot_use_up_its_tenants_allowance(keys: MemoryKeyStore) -> None:
    clock = Clock()
    gate = Gate(keys, None, RateLimits(tenant=RateLimiter(1.0, 4.0, clock),
                                       key=RateLimiter(1.0, 2.0, clock)))
    first, second, third = (_bearer(issue(keys, "acme", "read", None, NOW)[1])
                            for _ in range(3))
    for _ in range(2):
        gate.principal(first, None)
    over_key = _refused(lambda: gate.principal(first, None))
    for _ in range(2):  # the refused request took nothing from the tenant
        gate.principal(second, None)
    over_tenant = _refused(lambda: gate.principal(third, None))

    assert (over_key.status, over_key.code) == (429, "rate_limited")
    assert "MEMLEDGER_RATE_LIMIT_PER_KEY_PER_SECOND" in over_key.message
    assert "MEMLEDGER_RATE_LIMIT_PER_SECOND" in over_tenant.message
    assert "'acme'" in over_tenant.message


def test_requests_without_a_valid_key_are_limited_by_client_address(keys: MemoryKeyStore
                                                                    ) -> None:
    clock = Clock()
    gate = Gate(keys, None, RateLimits(address=RateLimiter(1.0, 2.0, clock)))
    valid = _bearer(issue(keys, "acme", "read", None, NOW)[1])
    unknown = _bearer(f"mlk_{'0' * 16}_{'a' * 43}")
    statuses = [_refused(partial(gate.principal, token, None, "10.0.0.1")).status
                for token in (None, unknown, None)]
    blocked = _refused(lambda: gate.principal(valid, None, "10.0.0.1"))

    assert statuses == [401, 401, 429]
    assert blocked.status == 429  # refused before its key is looked up
    assert "10.0.0.1" in blocked.message
    assert "MEMLEDGER_RATE_LIMIT_UNAUTHENTICATED_PER_SECOND" in blocked.message
    assert _refused(lambda: gate.principal(None, None, "10.0.0.2")).status == 401
    assert gate.principal(valid, None, "10.0.0.2").tenant == "acme"
    clock.now = 1.0
    assert _refused(lambda: gate.principal(None, None, "10.0.0.1")).status == 401


def test_a_rate_limit_refusal_says_whole_seconds_never_zero() -> None:
    gate = Gate(None, "default", RateLimits(tenant=RateLimiter(1_000.0, 1.0, Clock())))
    gate.principal(None, None)
    denied = _refused(lambda: gate.principal(None, None))
    assert denied.retry_after == pytest.approx(0.001)
    assert "retry in 1 s" in denied.message
    assert "0.00" not in denied.message


async def test_unauthenticated_http_requests_get_429_with_retry_after_from_one_address(
        keys: MemoryKeyStore) -> None:
    store = InMemoryEventStore()
    writer = GroupCommitWriter(store)
    gate = Gate(keys, None, RateLimits(address=RateLimiter(0.01, 2.0)))

    async def healthy() -> dict[str, Any]:
        return {"status": "ok"}

    app = create_app(writer, healthy, None, gate)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=("10.0.0.9", 1)),
                                 base_url="http://ingest") as api:
        answers = [await api.post("/v1/spaces", json={"space_id": "s1"}) for _ in range(3)]
    assert [a.status_code for a in answers] == [401, 401, 429]
    assert int(answers[-1].headers["Retry-After"]) >= 1
    error = answers[-1].json()["error"]
    assert (error["code"], error["retry_after_seconds"] > 1) == ("rate_limited", True)
    assert store.read_all(0, 10) == []


@pytest.mark.parametrize(("peer", "address"), [
    ("ipv4:10.1.2.3:5555", "10.1.2.3"), ("ipv6:[::1]:5555", "::1"),
    ("unix:/tmp/memledger.sock", "unix:/tmp/memledger.sock"), ("", None),
])
def test_a_grpc_callers_address_is_its_peer_without_the_port(peer: str, address: str | None
                                                              ) -> None:
    assert client_address(peer) == address


def test_grpc_calls_without_a_valid_key_are_limited_by_address_like_http(
        keys: MemoryKeyStore) -> None:
    resolve = tenant_resolver(Gate(keys, None, RateLimits(address=RateLimiter(0.01, 1.0))))
    assert _refused(lambda: resolve(None, None, "10.0.0.1")).status == 401
    assert _refused(lambda: resolve(None, None, "10.0.0.1")).status == 429
    assert _refused(lambda: resolve(None, None, "10.0.0.2")).status == 401


def test_the_rate_settings_default_a_key_to_half_its_tenants_rate() -> None:
    limits = load_settings().rate_limits
    assert limits.tenant is not None
    assert limits.key is not None
    assert limits.address is not None
    assert (limits.key.rate, limits.key.burst) == (limits.tenant.rate / 2,
                                                   limits.tenant.burst / 2)
    halved = load_settings(rate_limit_per_second=100.0, rate_limit_burst=10.0).rate_limits
    assert halved.key is not None
    assert (halved.key.rate, halved.key.burst) == (50.0, 5.0)
    off = load_settings(rate_limit_per_second=0, rate_limit_per_key_per_second=0,
                        rate_limit_unauthenticated_per_second=0).rate_limits
    assert (off.tenant, off.key, off.address) == (None, None, None)


def test_a_key_rate_above_its_tenants_fails_at_start_naming_the_variable() -> None:
    with pytest.raises(SettingsError, match="MEMLEDGER_RATE_LIMIT_PER_KEY_PER_SECOND"):
        load_settings(rate_limit_per_second=100.0, rate_limit_per_key_per_second=200.0)

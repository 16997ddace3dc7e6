"""Request limits: body size (413), time (504), and a tenant's rate (429 with Retry-After)."""

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, Router

from memledger_platform.auth import Denied, Gate
from memledger_platform.limits import RateLimiter, RequestLimits, retry_after


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
    gate = Gate(None, "default", RateLimiter(rate=1.0, burst=1.0, clock=Clock()))
    gate.principal(None, None)
    with pytest.raises(Denied) as denied:
        gate.principal(None, None)
    assert denied.value.status == 429
    assert denied.value.retry_after == pytest.approx(1.0)


async def _echo(request: Request) -> Response:
    return JSONResponse({"bytes": len(await request.body())})


async def _slow(_: Request) -> Response:
    await asyncio.sleep(5)
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

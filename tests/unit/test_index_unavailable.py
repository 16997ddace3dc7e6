"""A search while the vectors service is starting or restarting is a retryable 503, not a 500;
and ``memledger up`` is ready only once the index answers."""

import asyncio

import httpx
from fastapi import FastAPI

from memledger_cli import up
from memledger_platform.vectorindex.memory import InMemoryVectorIndex
from memledger_platform.vectorindex.port import IndexUnavailable
from memledger_query.entrypoints.http import _errors


async def test_an_index_not_serving_is_a_503_a_client_retries() -> None:
    app = FastAPI()
    _errors(app)

    @app.get("/search")
    async def search() -> None:
        raise IndexUnavailable("no vector index is serving at /h/vectors.sock")

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://q") as client:
        answer = await client.get("/search")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["code"] == "index_unavailable"


class StartingIndex(InMemoryVectorIndex):
    """An index that answers only from its third call (its process is starting)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def count(self) -> int:
        self.calls += 1
        if self.calls < 3:
            raise IndexUnavailable("starting")
        return super().count()


async def test_up_waits_for_the_index_to_answer_and_gives_up_past_its_time() -> None:
    starting = StartingIndex()
    await up._index_serving(starting, asyncio.Event())
    assert starting.calls == 3
    never = StartingIndex()
    never.calls = -10**6
    try:
        await up._index_serving(never, asyncio.Event(), seconds=0.3)
    except IndexUnavailable:
        return
    raise AssertionError("an index that never answers must fail the start")

"""The query side asks its injected clock what "now" is: a read that names no valid time is
answered at the clock's time, and says so in its basis."""

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from memledger_platform.clock import FixedClock
from memledger_query.entrypoints.api import At
from memledger_query.entrypoints.http import create_app
from memledger_query.entrypoints.semantic_http import Semantic, _basis
from memledger_schemas.api.reads import Basis, Graph
from memledger_schemas.api.semantic import SearchRequest

NOW = datetime(2031, 3, 4, 5, 6, 7, tzinfo=UTC)


class AnsweringReader:
    """A reader that answers a graph read with an empty graph at the basis it was asked for
    (its position fixed at 7), remembering what it was asked."""

    def __init__(self) -> None:
        self.asked: list[At] = []

    def lag(self) -> tuple[int, int]:
        return 7, 0

    async def wait_for(self, position: int | None, wait_ms: int) -> None:
        return None

    def run(self, fn: Callable[..., Any], *args: Any) -> Graph:
        at = next(a for a in args if isinstance(a, At))
        self.asked.append(at)
        return Graph(basis=Basis(position=7, recorded_at=at.recorded_at, valid_at=at.valid_at),
                     entities=[], relations=[])


class Reached:
    async def reached(self) -> int:
        return 7


def _graph(app: Any, query: str = "") -> httpx.Response:
    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://query") as client:
            return await client.get(f"/v1/spaces/demo/graph{query}")

    return asyncio.run(get())


def test_a_read_without_a_valid_time_is_answered_at_the_clocks_time() -> None:
    reader = AnsweringReader()
    app = create_app(reader, None, "t1", clock=FixedClock(NOW))  # type: ignore[arg-type]
    answer = _graph(app)
    assert answer.status_code == 200, answer.text
    assert datetime.fromisoformat(answer.json()["basis"]["valid_at"]) == NOW
    assert reader.asked == [At(NOW)]


def test_a_valid_time_the_request_names_wins_over_the_clock() -> None:
    reader = AnsweringReader()
    app = create_app(reader, None, "t1", clock=FixedClock(NOW))  # type: ignore[arg-type]
    answer = _graph(app, "?valid_at=2020-01-01T00:00:00Z")
    assert datetime.fromisoformat(answer.json()["basis"]["valid_at"]) == datetime(
        2020, 1, 1, tzinfo=UTC)


def test_a_search_without_a_valid_time_takes_its_basis_from_the_clock() -> None:
    semantic = Semantic(None, None, Reached(), None,  # type: ignore[arg-type]
                        clock=FixedClock(NOW))
    at = asyncio.run(_basis(semantic, SearchRequest(query="what changed?")))
    assert at == Basis(position=7, recorded_at=None, valid_at=NOW)

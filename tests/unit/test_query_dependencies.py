"""The query routes' dependencies run on the event loop: FastAPI calls a plain callable (a
class of query parameters) in its thread pool, a hop per request that under load waits for a
worker and the GIL, behind every write the same process serves."""

import inspect
from collections.abc import Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from memledger_query.bootstrap import unconnected_app


def _routes(routes: list[Any]) -> Iterator[APIRoute]:
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        included = getattr(route, "original_router", None)  # an included router, unflattened
        if included is not None:
            yield from _routes(included.routes)


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def test_every_dependency_of_every_query_route_is_a_coroutine() -> None:
    routes = list(_routes(unconnected_app().routes))
    off_the_loop = {f"{route.path}: {getattr(call, '__name__', call)}"
                    for route in routes for call in _calls(route.dependant)
                    if not inspect.iscoroutinefunction(call)}
    assert routes
    assert off_the_loop == set()

"""A query route's parameters are gathered in the event loop: FastAPI calls a dependency that
is not a coroutine function (a dataclass of query parameters given to ``Depends`` as it is)
on its thread pool, a thread hop for each of them on every request (about a quarter of an
as-of read's CPU in the server)."""

import asyncio
import inspect
from collections.abc import Iterator
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from memledger_query.bootstrap import unconnected_app
from memledger_query.entrypoints import api


def _dependencies(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _dependencies(sub)


def _routes(routes: list[Any]) -> Iterator[APIRoute]:
    """Every API route, those of included routers too (FastAPI keeps them in their own)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif hasattr(route, "original_router"):
            yield from _routes(route.original_router.routes)


def test_no_query_route_gathers_a_parameter_on_the_thread_pool() -> None:
    routes = list(_routes(unconnected_app().routes))
    on_pool = sorted({f"{route.path}: {getattr(call, '__qualname__', call)}"
                      for route in routes for call in _dependencies(route.dependant)
                      if not inspect.iscoroutinefunction(call)})
    assert len(routes) > 20  # the walk reached the routes
    assert on_pool == []


def test_a_query_model_is_built_from_its_parameters_as_its_class_would_be() -> None:
    build = api.query_model(api.TimeQuery).dependency
    assert inspect.signature(build).parameters == inspect.signature(api.TimeQuery).parameters
    assert asyncio.run(build(as_of_position=7)) == api.TimeQuery(as_of_position=7)

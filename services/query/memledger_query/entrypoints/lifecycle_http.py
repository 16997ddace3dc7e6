"""HTTP for a memory's lifecycle: the supersession chain of an item, a space's policy
versions and the merges consolidation suggested (plain reads, with their basis)."""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi import FastAPI, Query

from memledger_query.core import lifecycle_views, views
from memledger_query.core.reader import Reader
from memledger_query.entrypoints.http import (
    AsOf,
    MinPosition,
    Problem,
    Tenant,
    WaitMs,
    _json,
    _uuid,
    known_space,
    read_visible,
)
from memledger_query.entrypoints.http import principal as _principal
from memledger_schemas.api.reads import (
    Basis,
    ChainAnswer,
    MergeSuggestions,
    PolicyHistory,
)

T = TypeVar("T")


def add_routes(app: FastAPI, reader: Reader) -> None:
    async def read(min_position: int | None, wait_ms: int, fn: Callable[..., T], *args: Any
                   ) -> T:
        return await read_visible(reader, min_position, wait_ms, fn, *args)

    @app.get("/v1/spaces/{space_id}/items/{item_id}/chain", response_model=ChainAnswer)
    async def chain(space_id: str, item_id: str, x_tenant: Tenant = None,
                    as_of_position: AsOf = None, min_position: MinPosition = None,
                    wait_ms: WaitMs = 2_000) -> Any:
        item = _uuid(item_id, "path.item_id")
        found = await read(_wanted(min_position, as_of_position), wait_ms, _chain,
                           _principal().tenant, space_id, item, as_of_position)
        if found is None:
            raise Problem(404, "not_found", f"memory item {item!r} not found in {space_id!r}")
        return _json(found)

    @app.get("/v1/spaces/{space_id}/policies", response_model=PolicyHistory)
    async def policies(space_id: str, x_tenant: Tenant = None, as_of_position: AsOf = None,
                       min_position: MinPosition = None, wait_ms: WaitMs = 2_000) -> Any:
        return _json(await read(_wanted(min_position, as_of_position), wait_ms, _policies,
                                _principal().tenant, space_id, as_of_position))

    @app.get("/v1/spaces/{space_id}/merge-suggestions", response_model=MergeSuggestions)
    async def suggestions(space_id: str, x_tenant: Tenant = None, as_of_position: AsOf = None,
                          limit: Annotated[int, Query(ge=1, le=1_000)] = 100,
                          min_position: MinPosition = None, wait_ms: WaitMs = 2_000) -> Any:
        return _json(await read(_wanted(min_position, as_of_position), wait_ms, _suggestions,
                                _principal().tenant, space_id, as_of_position, limit))


def _wanted(min_position: int | None, as_of_position: int | None) -> int | None:
    return max([p for p in (min_position, as_of_position) if p is not None], default=None)


def _basis(conn: Any, s: str, position: int | None) -> Basis:
    return views.basis(conn, s, datetime.now(UTC), position, None)


def _chain(conn: Any, s: str, tenant: str, space: str, item: str, position: int | None
           ) -> ChainAnswer | None:
    return lifecycle_views.chain(conn, s, tenant, space, item, _basis(conn, s, position))


def _policies(conn: Any, s: str, tenant: str, space: str, position: int | None
              ) -> PolicyHistory:
    at = _basis(conn, s, position)
    versions = lifecycle_views.policies(conn, s, tenant, space, at)
    known_space(conn, s, tenant, space, empty=not versions)
    return PolicyHistory(basis=at, space_id=space, versions=versions)


def _suggestions(conn: Any, s: str, tenant: str, space: str, position: int | None, limit: int
                 ) -> MergeSuggestions:
    at = _basis(conn, s, position)
    found = lifecycle_views.merge_suggestions(conn, s, tenant, space, at, limit)
    known_space(conn, s, tenant, space, empty=not found)
    return MergeSuggestions(basis=at, space_id=space, suggestions=found)

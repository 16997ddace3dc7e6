"""HTTP for a memory's lifecycle: the supersession chain of an item, a space's policy
versions and the merges consolidation suggested (plain reads, with their basis)."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from memledger_platform.clock import Clock
from memledger_query.core import lifecycle_views
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api
from memledger_query.entrypoints.api import (
    AsOf,
    At,
    Caller,
    Limit,
    Problem,
    Wait,
    json_answer,
    read_visible,
    uuid_of,
)
from memledger_query.entrypoints.reads import known_space
from memledger_schemas.api.reads import ChainAnswer, MergeSuggestions, PolicyHistory


def router(reader: Reader, clock: Clock) -> APIRouter:
    routes = api.router()

    @routes.get("/v1/spaces/{space_id}/items/{item_id}/chain", response_model=ChainAnswer)
    async def chain(space_id: str, item_id: str, who: Caller, wait: Wait,
                    as_of_position: AsOf = None) -> Response:
        item = uuid_of(item_id, "path.item_id")
        found = await read_visible(reader, wait.needing(as_of_position), _chain, who.tenant,
                                   space_id, item, At(clock.now(), as_of_position))
        if found is None:
            raise Problem(404, "not_found", f"memory item {item!r} not found in {space_id!r}")
        return json_answer(found)

    @routes.get("/v1/spaces/{space_id}/policies", response_model=PolicyHistory)
    async def policies(space_id: str, who: Caller, wait: Wait, as_of_position: AsOf = None
                       ) -> Response:
        return json_answer(await read_visible(reader, wait.needing(as_of_position), _policies,
                                              who.tenant, space_id,
                                              At(clock.now(), as_of_position)))

    @routes.get("/v1/spaces/{space_id}/merge-suggestions", response_model=MergeSuggestions)
    async def suggestions(space_id: str, who: Caller, wait: Wait, as_of_position: AsOf = None,
                          limit: Limit = 100) -> Response:
        return json_answer(await read_visible(reader, wait.needing(as_of_position),
                                              _suggestions, who.tenant, space_id,
                                              At(clock.now(), as_of_position), limit))

    return routes


def _chain(conn: Any, s: str, tenant: str, space: str, item: str, at: At
           ) -> ChainAnswer | None:
    return lifecycle_views.chain(conn, s, tenant, space, item, at.basis(conn, s))


def _policies(conn: Any, s: str, tenant: str, space: str, at: At) -> PolicyHistory:
    basis = at.basis(conn, s)
    versions = lifecycle_views.policies(conn, s, tenant, space, basis)
    known_space(conn, s, tenant, space, empty=not versions)
    return PolicyHistory(basis=basis, space_id=space, versions=versions)


def _suggestions(conn: Any, s: str, tenant: str, space: str, at: At, limit: int
                 ) -> MergeSuggestions:
    basis = at.basis(conn, s)
    found = lifecycle_views.merge_suggestions(conn, s, tenant, space, basis, limit)
    known_space(conn, s, tenant, space, empty=not found)
    return MergeSuggestions(basis=basis, space_id=space, suggestions=found)

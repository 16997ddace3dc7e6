"""The graph of a space (``/v1/spaces/{space_id}/graph``) and of one entity: its neighbours and
the items that mention it, each at any basis."""

from fastapi import APIRouter
from fastapi.responses import Response

from memledger_platform.clock import Clock
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api, reads
from memledger_query.entrypoints.api import (
    Caller,
    Depth,
    Limit,
    Travel,
    Wait,
    json_answer,
    read_visible,
)
from memledger_schemas.api.reads import Graph, ItemList, Neighbours


def router(reader: Reader, clock: Clock) -> APIRouter:
    routes = api.router()

    @routes.get("/v1/spaces/{space_id}/graph", response_model=Graph)
    async def graph(space_id: str, who: Caller, when: Travel, wait: Wait) -> Response:
        at = when.at(clock.now())
        return json_answer(await read_visible(reader, wait.needing(at.position), reads.graph,
                                              who.tenant, space_id, at))

    # ``:path``: an entity id may hold a "/" (ids are the client's, e.g. "wikidata/Q42").
    @routes.get("/v1/spaces/{space_id}/entities/{entity_id:path}/neighbours",
                response_model=Neighbours)
    async def neighbours(space_id: str, entity_id: str, who: Caller, when: Travel,
                         wait: Wait, depth: Depth = 1) -> Response:
        at = when.at(clock.now())
        basis, found = await read_visible(reader, wait.needing(at.position), reads.neighbours,
                                          who.tenant, space_id, entity_id, depth, at)
        if found is None:
            raise reads.no_entity(entity_id, space_id, basis)
        return json_answer(found)

    @routes.get("/v1/spaces/{space_id}/entities/{entity_id:path}/items",
                response_model=ItemList)
    async def items_mentioning(space_id: str, entity_id: str, who: Caller, when: Travel,
                               wait: Wait, limit: Limit = 100) -> Response:
        at = when.at(clock.now())
        basis, found = await read_visible(reader, wait.needing(at.position), reads.mentioning,
                                          who.tenant, space_id, entity_id, at, limit)
        if found is None:
            raise reads.no_entity(entity_id, space_id, basis)
        return json_answer(ItemList(basis=basis, items=found))

    return routes

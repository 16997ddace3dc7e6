"""``/v1/spaces/{space_id}/items``: an item (projected, or replayed from the events), a
filtered listing, and an item's history on both time axes."""

import asyncio
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.responses import Response

from memledger_platform.clock import Clock
from memledger_platform.crypto import Opener
from memledger_platform.eventstore import EventStore
from memledger_query.core import replay, views
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api, reads
from memledger_query.entrypoints.api import AsOf as AsOfPosition
from memledger_query.entrypoints.api import (
    At,
    Caller,
    Limit,
    Problem,
    Travel,
    Wait,
    json_answer,
    read_visible,
    uuid_of,
)
from memledger_schemas.api.reads import Basis, History, Item, ItemAnswer, ItemList


@dataclass(frozen=True)
class ListFilters:
    """A listing's filters, as its query parameters."""

    kind: Annotated[list[str] | None, Query()] = None
    tag: Annotated[list[str] | None, Query()] = None
    session_id: str | None = None
    agent_id: str | None = None
    subject: str | None = None
    predicate: str | None = None
    include_archived: bool = False
    limit: Limit = 100
    after: str | None = None

    def checked(self) -> views.ItemFilters:
        """The filters the read takes (a session id or cursor that is not a UUID: 422)."""
        return views.ItemFilters(
            kinds=self.kind, tags=self.tag, include_archived=self.include_archived,
            session_id=self.session_id and uuid_of(self.session_id, "query.session_id"),
            agent_id=self.agent_id, subject=self.subject, predicate=self.predicate,
            limit=self.limit, after=self.after and uuid_of(self.after, "query.after"))


Filters = Annotated[ListFilters, api.query_model(ListFilters)]


@dataclass(frozen=True)
class ItemReads:
    """What the item routes read: the read models, or the events themselves (``replay``)."""

    reader: Reader
    store: EventStore
    opener: Opener | None
    clock: Clock

    async def item(self, tenant: str, space: str, item: str, at: At, wait: Wait
                   ) -> tuple[Basis, Item | None]:
        return await read_visible(self.reader, wait.needing(at.position), reads.item, tenant,
                                  space, item, at)

    async def replayed(self, tenant: str, space: str, item: str, at: At
                       ) -> tuple[Basis, Item | None]:
        basis, folded = await asyncio.to_thread(replay.basis, self.store, tenant, at.valid_at,
                                                at.position, at.recorded_at, self.opener)
        return basis, replay.item(folded, tenant, space, item, basis)


def router(items: ItemReads) -> APIRouter:
    routes = api.router()
    reader, clock = items.reader, items.clock

    @routes.get("/v1/spaces/{space_id}/items/{item_id}", response_model=ItemAnswer)
    async def get_item(space_id: str, item_id: str, who: Caller, when: Travel, wait: Wait,
                       source: Literal["projection", "replay"] = "projection") -> Response:
        item, at = uuid_of(item_id, "path.item_id"), when.at(clock.now())
        basis, found = await (items.replayed(who.tenant, space_id, item, at)
                              if source == "replay" else
                              items.item(who.tenant, space_id, item, at, wait))
        if found is None:
            raise Problem(404, "not_found", f"memory item {item!r} not found in space "
                          f"{space_id!r} at valid time {at.valid_at.isoformat()} as of "
                          f"position {basis.position}")
        return json_answer(ItemAnswer(basis=basis, item=found))

    @routes.get("/v1/spaces/{space_id}/items", response_model=ItemList)
    async def list_items(space_id: str, who: Caller, when: Travel, filters: Filters,
                         wait: Wait) -> Response:
        checked, at = filters.checked(), when.at(clock.now())
        basis, found = await read_visible(reader, wait.needing(at.position), reads.items,
                                          who.tenant, space_id, at, checked)
        return json_answer(ItemList(basis=basis, items=found))

    @routes.get("/v1/spaces/{space_id}/items/{item_id}/history", response_model=History)
    async def item_history(space_id: str, item_id: str, who: Caller, wait: Wait,
                           as_of_position: AsOfPosition = None) -> Response:
        item = uuid_of(item_id, "path.item_id")
        found = await read_visible(reader, wait.needing(as_of_position), reads.history,
                                   who.tenant, space_id, item, At(clock.now(), as_of_position))
        if found is None:
            raise Problem(404, "not_found", f"memory item {item!r} not found in {space_id!r}")
        return json_answer(found)

    return routes

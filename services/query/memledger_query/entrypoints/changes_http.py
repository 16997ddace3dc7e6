"""The change feeds: ``/v1/spaces/{space_id}/changes`` and, for a key of the whole tenant,
``/v1/changes`` (a page at a time, resumed from an opaque cursor)."""

from fastapi import APIRouter
from fastapi.responses import Response

from memledger_query.core.reader import Reader
from memledger_query.entrypoints import api, reads
from memledger_query.entrypoints.api import (
    Caller,
    Limit,
    RecordedAt,
    Wait,
    json_answer,
    read_visible,
)
from memledger_schemas.api.reads import ChangePage


def router(reader: Reader) -> APIRouter:
    routes = api.router()

    @routes.get("/v1/spaces/{space_id}/changes", response_model=ChangePage)
    async def space_changes(space_id: str, who: Caller, wait: Wait, since: RecordedAt = None,
                            after: str | None = None, limit: Limit = 100) -> Response:
        return json_answer(await read_visible(reader, wait, reads.changes, who.tenant,
                                              space_id, since, reads.decode_cursor(after),
                                              limit))

    @routes.get("/v1/changes", response_model=ChangePage)
    async def tenant_changes(who: Caller, wait: Wait, since: RecordedAt = None,
                             after: str | None = None, limit: Limit = 100) -> Response:
        return json_answer(await read_visible(reader, wait, reads.changes, who.tenant, None,
                                              since, reads.decode_cursor(after), limit))

    return routes

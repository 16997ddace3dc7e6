"""HTTP for the retrieval audit: ``GET /v1/retrievals/{retrieval_id}`` (what an audited search
or context call showed, at which basis, under which ranking policy) and ``POST
/v1/retrievals/{retrieval_id}/replay`` (its recorded request run again at its recorded basis,
compared entry by entry with what was recorded).

A retrieval is read with the grants its call needed: every space it read, or a key for the
whole tenant if it read them all. Another tenant's retrieval, or one the key may not read, is
not found.
"""

from fastapi import APIRouter
from fastapi.responses import Response

from memledger_platform.auth import Principal
from memledger_query.core import retrievals
from memledger_query.core.reader import Reader
from memledger_query.core.retrieval_views import retrieval
from memledger_query.entrypoints import api
from memledger_query.entrypoints.api import (
    Caller,
    Problem,
    Visible,
    Wait,
    json_answer,
    read_visible,
    uuid_of,
)
from memledger_query.entrypoints.semantic_http import (
    Semantic,
    _basis,
    _context,
    _policy,
    _search,
    _wait_read_model,
)
from memledger_schemas.api.retrievals import ReplayAnswer, RetrievalRecord, Shown


def router(semantic: Semantic) -> APIRouter:
    """The retrieval audit's routes (the query app's middleware authenticates)."""
    routes = api.router()

    @routes.get("/v1/retrievals/{retrieval_id}", response_model=RetrievalRecord)
    async def get_retrieval(retrieval_id: str, who: Caller, wait: Wait) -> Response:
        return json_answer(await recorded(semantic.reader, who, retrieval_id, wait))

    @routes.post("/v1/retrievals/{retrieval_id}/replay", response_model=ReplayAnswer)
    async def replay(retrieval_id: str, who: Caller, wait: Wait) -> Response:
        record = await recorded(semantic.reader, who, retrieval_id, wait)
        return json_answer(await replayed(semantic, who.tenant, record))

    return routes


async def recorded(reader: Reader, who: Principal, retrieval_id: str, wait: Visible
                   ) -> RetrievalRecord:
    """The retrieval ``who`` may read (404 for another tenant's, or one naming a space the
    key may not read)."""
    ident = uuid_of(retrieval_id, "path.retrieval_id")
    found = await read_visible(reader, wait, retrieval, who.tenant, ident)
    if found is None or not _may_read(who, found.spaces):
        raise Problem(404, "not_found", f"retrieval {ident} not found")
    return found


def _may_read(who: Principal, spaces: list[str]) -> bool:
    # Hidden rather than forbidden: the record would name spaces the key may not know of.
    if not who.may("read"):
        return False
    return who.spaces is None or (bool(spaces) and all(who.sees(s) for s in spaces))


async def replayed(semantic: Semantic, tenant: str, record: RetrievalRecord) -> ReplayAnswer:
    """The recorded request at its recorded basis (pinned in its parameters), unaudited."""
    shown: list[Shown]
    if record.operation == "search":
        body, granted = retrievals.search_request(record)
        at = await _basis(semantic, body)
        await _wait_read_model(semantic, body, at)
        found = await semantic.run(_search, semantic, tenant, body, at, granted)
        shown = retrievals.shown_by_search(found)
    else:
        context = retrievals.context_request(record)
        at = await _basis(semantic, context)
        await _wait_read_model(semantic, context, at)
        bundle = await semantic.run(_context, semantic, tenant, context, at)
        shown = retrievals.shown_by_context(bundle)
    same, same_items, differences = retrievals.compare(record.results, shown)
    return ReplayAnswer(
        retrieval_id=record.retrieval_id, basis=at, same=same, same_items=same_items,
        policy_version=record.policy_version, current_policy_version=_policy(semantic),
        recorded=record.results, replayed=shown, differences=differences)

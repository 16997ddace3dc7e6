"""HTTP for the retrieval audit: ``GET /v1/retrievals/{retrieval_id}`` (what an audited search
or context call showed, at which basis, under which ranking policy) and ``POST
/v1/retrievals/{retrieval_id}/replay`` (its recorded request run again at its recorded basis,
compared entry by entry with what was recorded).

A retrieval is read with the grants its call needed: every space it read, or a key for the
whole tenant if it read them all. Another tenant's retrieval, or one the key may not read, is
not found.
"""

import asyncio

from fastapi import FastAPI
from fastapi.responses import Response

from memledger_platform.auth import Principal
from memledger_query.core import retrievals
from memledger_query.core.reader import NotYetVisible, Reader
from memledger_query.core.retrieval_views import retrieval
from memledger_query.entrypoints.http import (
    RETRY_AFTER_SECONDS,
    MinPosition,
    Problem,
    Tenant,
    WaitMs,
    _json,
    _uuid,
    principal,
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


def add_routes(app: FastAPI, semantic: Semantic) -> None:
    """The retrieval audit's routes on a query app (its middleware authenticates)."""
    @app.get("/v1/retrievals/{retrieval_id}", response_model=RetrievalRecord)
    async def get_retrieval(retrieval_id: str, x_tenant: Tenant = None,
                            min_position: MinPosition = None, wait_ms: WaitMs = 2_000
                            ) -> Response:
        return _json(await _recorded(semantic.reader, principal(), retrieval_id,
                                     min_position, wait_ms))

    @app.post("/v1/retrievals/{retrieval_id}/replay", response_model=ReplayAnswer)
    async def replay(retrieval_id: str, x_tenant: Tenant = None,
                     min_position: MinPosition = None, wait_ms: WaitMs = 2_000) -> Response:
        who = principal()
        record = await _recorded(semantic.reader, who, retrieval_id, min_position, wait_ms)
        return _json(await _replay(semantic, who.tenant, record))


async def _recorded(reader: Reader, who: Principal, retrieval_id: str,
                    min_position: int | None, wait_ms: int) -> RetrievalRecord:
    ident = _uuid(retrieval_id, "path.retrieval_id")
    try:
        await reader.wait_for(min_position, wait_ms)
    except NotYetVisible as late:
        raise Problem(503, "not_yet_visible", str(late), "query.min_position",
                      projected_position=late.reached,
                      retry_after_seconds=RETRY_AFTER_SECONDS) from None
    found = await asyncio.to_thread(reader.run, retrieval, who.tenant, ident)
    if found is None or not _may_read(who, found.spaces):
        raise Problem(404, "not_found", f"retrieval {ident} not found")
    return found


def _may_read(who: Principal, spaces: list[str]) -> bool:
    # Hidden rather than forbidden: the record would name spaces the key may not know of.
    if not who.may("read"):
        return False
    return who.spaces is None or (bool(spaces) and all(who.sees(s) for s in spaces))


async def _replay(semantic: Semantic, tenant: str, record: RetrievalRecord) -> ReplayAnswer:
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

"""The query gRPC API (``memledger.v1.Query``): the HTTP reads over gRPC, plus streams.

Each call runs the HTTP route's read functions (``views`` through the ``Reader``, ``replay``,
the search and context helpers of ``semantic_http``) and answers with the same DTO, converted
field for field: the messages are named like the HTTP JSON, so a DTO's JSON form is parsed
straight into its message. Requests are read the other way round (message → JSON form →
pydantic) and validated with the HTTP constraints, so a bad field is INVALID_ARGUMENT naming it.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal, TypeVar

import grpc
from google.protobuf.message import Message
from pydantic import BaseModel, Field
from typing_extensions import override

from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_platform.grpc_server import (
    PrincipalResolver,
    Register,
    RpcContext,
    streaming,
    unary,
)
from memledger_query.core import export, replay, views
from memledger_query.core.reader import NotYetVisible, Reader
from memledger_query.entrypoints import reads
from memledger_query.entrypoints.api import At, Problem, needs, uuid_of, within_head
from memledger_query.entrypoints.grpc_convert import message as _message
from memledger_query.entrypoints.grpc_convert import params as _params
from memledger_query.entrypoints.grpc_convert import refusing as _refusing
from memledger_query.entrypoints.grpc_reads import ReadMethods
from memledger_query.entrypoints.semantic_http import Semantic, answer_context, answer_search
from memledger_schemas.api.reads import ItemAnswer, ItemList
from memledger_schemas.api.semantic import (
    ContextRequest,
    Instant,
    SearchRequest,
    Strict,
    TimeTravel,
)
from memledger_schemas.grpc.v1 import query_pb2 as pb
from memledger_schemas.grpc.v1 import query_pb2_grpc

FOLLOW_POLL_SECONDS = 0.1
"""How often a followed changes feed looks for new changes once caught up."""

P = TypeVar("P", bound=BaseModel)
T = TypeVar("T")
Msg = TypeVar("Msg", bound=Message)


class ItemParams(TimeTravel):
    space_id: str
    item_id: str
    source: Literal["projection", "replay"] = "projection"


class ListParams(TimeTravel):
    space_id: str
    kinds: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    session_id: str | None = None
    agent_id: str | None = None
    subject: str | None = None
    predicate: str | None = None
    include_archived: bool = False
    limit: int = Field(default=100, ge=1, le=1_000)
    after: str | None = None


class HistoryParams(TimeTravel):
    space_id: str
    item_id: str


class ChangesParams(Strict):
    space_id: str | None = None
    since: Instant = None
    after: str | None = None
    limit: int = Field(default=100, ge=1, le=1_000)
    min_position: int | None = Field(default=None, ge=0)
    wait_ms: int = Field(default=2_000, ge=0, le=30_000)
    follow: bool = False


class ReplayParams(Strict):
    from_position: int = Field(default=1, ge=1)
    to_position: int | None = Field(default=None, ge=1)
    since: Instant = None
    until: Instant = None
    space_id: str | None = None
    types: list[str] = Field(default_factory=list)
    batch: int = Field(default=500, ge=1, le=5_000)


class QueryServicer(ReadMethods):
    def __init__(self, reader: Reader, store: EventStore, semantic: Semantic,
                 resolve: PrincipalResolver) -> None:
        self._reader = reader
        self._store = store
        self._semantic = semantic
        self._resolve = resolve

    def register(self, server: grpc.aio.Server) -> None:
        query_pb2_grpc.add_QueryServicer_to_server(self, server)

    @override
    @unary
    async def GetItem(self, request: pb.GetItemRequest, context: RpcContext) -> pb.ItemAnswer:
        tenant, p = (await self._caller(context)).tenant, _params(ItemParams, request)
        with _refusing():
            await self._within_head(p)
            item, at = uuid_of(p.item_id, "item_id"), self._at(p)
            if p.source == "replay":
                basis, folded = await asyncio.to_thread(replay.basis, self._store, tenant,
                                                        at.valid_at, p.as_of_position,
                                                        p.recorded_at)
                found = replay.item(folded, tenant, p.space_id, item, basis)
            else:
                basis, found = await self._read(needs(p.min_position, p.as_of_position),
                                                p.wait_ms, reads.item, tenant, p.space_id,
                                                item, at)
            if found is None:
                raise Problem(404, "not_found", f"memory item {item!r} not found in space "
                              f"{p.space_id!r} at valid time {at.valid_at.isoformat()} as "
                              f"of position {basis.position}")
            return _message(ItemAnswer(basis=basis, item=found), pb.ItemAnswer())

    @override
    @unary
    async def ListItems(self, request: pb.ListItemsRequest, context: RpcContext) -> pb.ItemList:
        tenant, p = (await self._caller(context)).tenant, _params(ListParams, request)
        with _refusing():
            await self._within_head(p)
            filters = views.ItemFilters(
                kinds=p.kinds or None, tags=p.tags or None,
                include_archived=p.include_archived,
                session_id=p.session_id and uuid_of(p.session_id, "session_id"),
                agent_id=p.agent_id, subject=p.subject, predicate=p.predicate,
                limit=p.limit, after=p.after and uuid_of(p.after, "after"))
            at, found = await self._read(needs(p.min_position, p.as_of_position), p.wait_ms,
                                         reads.items, tenant, p.space_id, self._at(p),
                                         filters)
            return _message(ItemList(basis=at, items=found), pb.ItemList())

    @override
    @unary
    async def History(self, request: pb.HistoryRequest, context: RpcContext) -> pb.ItemHistory:
        tenant, p = (await self._caller(context)).tenant, _params(HistoryParams, request)
        with _refusing():
            await self._within_head(p)
            item = uuid_of(p.item_id, "item_id")
            found = await self._read(needs(p.min_position, p.as_of_position), p.wait_ms,
                                     reads.history, tenant, p.space_id, item,
                                     At(self._now(), p.as_of_position))
            if found is None:
                raise Problem(404, "not_found",
                              f"memory item {item!r} not found in {p.space_id!r}")
            return _message(found, pb.ItemHistory())

    @override
    @unary
    async def Search(self, request: pb.SearchRequest, context: RpcContext) -> pb.SearchAnswer:
        tenant, body = (await self._caller(context)).tenant, _params(SearchRequest,
                                                                             request)
        with _refusing():
            answer = await answer_search(self._semantic, tenant, "grpc", body)
            return _message(answer, pb.SearchAnswer())

    @override
    @unary
    async def Context(self, request: pb.ContextRequest, context: RpcContext) -> pb.ContextAnswer:
        tenant, body = (await self._caller(context)).tenant, _params(ContextRequest,
                                                                             request)
        with _refusing():
            answer = await answer_context(self._semantic, tenant, "grpc", body)
            return _message(answer, pb.ContextAnswer())

    @override
    @streaming
    async def Changes(self, request: pb.ChangesRequest, context: RpcContext
                      ) -> AsyncIterator[pb.ChangePage]:
        tenant, p = (await self._caller(context)).tenant, _params(ChangesParams, request)
        with _refusing():
            after = reads.decode_cursor(p.after)
            await self._within_head(p)
            await self._wait(p.min_position, p.wait_ms)
        caught_up = False
        while True:
            with _refusing():  # a space that does not exist is NOT_FOUND
                page = await asyncio.to_thread(self._reader.run, reads.changes, tenant, p.space_id,
                                               p.since, after, p.limit)
            full = len(page.changes) == p.limit
            if page.changes or not caught_up:
                yield _message(page, pb.ChangePage())
            caught_up = caught_up or not full
            if caught_up and not p.follow:
                return
            after = reads.decode_cursor(page.next_cursor)
            if not full:
                await asyncio.sleep(FOLLOW_POLL_SECONDS)

    @override
    @streaming
    async def Replay(self, request: pb.ReplayRequest, context: RpcContext
                     ) -> AsyncIterator[pb.ReplayChunk]:
        tenant, p = (await self._caller(context)).tenant, _params(ReplayParams, request)
        selection = export.Selection(tenant=tenant, space=p.space_id,
                                     types=frozenset(p.types), since=p.since, until=p.until)
        last = (p.to_position if p.to_position is not None
                else await asyncio.to_thread(self._store.max_position))
        after, chunk = p.from_position - 1, pb.ReplayChunk()
        while after < last:
            scanned = await asyncio.to_thread(export.scan, self._store, after, last, selection)
            for event in scanned.events:
                chunk.events.append(_replayed(event))
                if len(chunk.events) == p.batch:
                    chunk.through_position = event.position
                    yield chunk
                    chunk = pb.ReplayChunk()
            after = scanned.through
            if scanned.done:
                break
        chunk.through_position = after
        yield chunk

    async def _within_head(self, p: TimeTravel | ChangesParams) -> None:
        await within_head(self._reader, "", {
            "as_of_position": getattr(p, "as_of_position", None),
            "min_position": p.min_position})

    async def _wait(self, min_position: int | None, wait_ms: int) -> None:
        try:
            await self._reader.wait_for(min_position, wait_ms)
        except NotYetVisible as late:
            raise Problem(503, "not_yet_visible", str(late), "min_position",
                          projected_position=late.reached) from None

    async def _read(self, min_position: int | None, wait_ms: int, fn: Callable[..., T],
                    *args: Any) -> T:
        await self._wait(min_position, wait_ms)
        return await asyncio.to_thread(self._reader.run, fn, *args)


def registrar(reader: Reader, store: EventStore, semantic: Semantic,
              resolve: PrincipalResolver) -> Register:
    """What a gRPC server needs to serve queries (``resolve``: the caller check needing the
    read role, ``grpc_server.principal_resolver``)."""
    return QueryServicer(reader, store, semantic, resolve).register


def _replayed(event: RecordedEvent) -> pb.ReplayedEvent:
    replayed = pb.ReplayedEvent(position=event.position, event_type=event.event_type,
                                document=event.document().decode())
    replayed.recorded_at.FromDatetime(event.recorded_at)
    return replayed

"""The query gRPC API's plain reads beyond items and search: conversations, the graph,
listings, stats, the lifecycle and forming reads, the retrieval audit and the vector digest.

Each method runs the read function its HTTP route runs and answers with the same DTO, converted
field for field (``grpc_api._message``); its request is read as the route's parameters and
validated with the route's bounds, so a bad field is INVALID_ARGUMENT naming it. The caller is
checked as for every query call (the read role; a key for the whole tenant); erasure receipts
and the vector digest need the admin role, as over HTTP.
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from typing_extensions import override

from memledger_platform import partitions
from memledger_platform.auth import Principal
from memledger_platform.grpc_server import (
    PrincipalResolver,
    RpcContext,
    caller,
    refusal,
    unary,
)
from memledger_query.core import vector_summary
from memledger_query.core.message_views import SessionFilters
from memledger_query.core.reader import Reader
from memledger_query.entrypoints import (
    forming_http,
    lifecycle_http,
    listing,
    reads,
    retrieval_http,
    session_http,
    stats,
)
from memledger_query.entrypoints.api import At, Problem, Visible, needs, read_visible, uuid_of
from memledger_query.entrypoints.grpc_convert import message, params, refusing
from memledger_query.entrypoints.grpc_params import (
    AgentsParams,
    EntityParams,
    ErasuresParams,
    ItemParams,
    LifecycleParams,
    MessagesParams,
    ProfileParams,
    RetrievalParams,
    SessionsParams,
    SpaceParams,
    SpacesParams,
    StatsParams,
    SummaryParams,
)
from memledger_query.entrypoints.semantic_http import Semantic
from memledger_schemas.api.reads import ItemList
from memledger_schemas.api.semantic import TimeTravel
from memledger_schemas.grpc.v1 import query_pb2 as pb
from memledger_schemas.grpc.v1 import query_pb2_grpc

T = TypeVar("T")


class ReadMethods(query_pb2_grpc.QueryServicer):
    """The reads; ``QueryServicer`` gives them their reader, semantic memory and caller."""

    _reader: Reader
    _semantic: Semantic
    _resolve: PrincipalResolver

    async def _caller(self, context: RpcContext) -> Principal:
        found = await caller(context, self._resolve)
        partitions.reading_for(found.tenant)  # the call reads its tenant's partition
        return found

    def _now(self) -> datetime:
        return self._semantic.clock.now()

    def _at(self, p: TimeTravel) -> At:
        """The basis ``p`` asks for, valid now unless it names a valid time."""
        return At(p.valid_at or self._now(), p.as_of_position, p.recorded_at)

    async def _visible(self, min_position: int | None, wait_ms: int, fn: Callable[..., T],
                       *args: Any) -> T:
        with refusing():
            return await read_visible(self._reader, Visible(min_position, wait_ms), fn, *args)

    @override
    @unary
    async def Messages(self, request: pb.MessagesRequest, context: RpcContext
                       ) -> pb.Conversation:
        who, p = await self._caller(context), params(MessagesParams, request)
        with refusing():
            session = uuid_of(p.session_id, "session_id")
            found = await read_visible(
                self._reader, Visible(needs(p.min_position, p.as_of_position), p.wait_ms),
                reads.conversation, who.tenant, p.space_id, session,
                At(self._now(), p.as_of_position), p.limit)
            if found is None:
                raise Problem(404, "not_found", f"session {session!r} not found in "
                              f"{p.space_id!r}")
        return message(found, pb.Conversation())

    @override
    @unary
    async def ListSessions(self, request: pb.ListSessionsRequest, context: RpcContext
                           ) -> pb.SessionList:
        who, p = await self._caller(context), params(SessionsParams, request)
        filters = SessionFilters(p.agent_id, p.participant, p.status, p.started_from,
                                 p.started_to, p.ended_from, p.ended_to)
        with refusing():
            page = session_http.Page(p.limit, session_http.decode_after(p.after))
        found = await self._visible(p.min_position, p.wait_ms, session_http.sessions,
                                    who.tenant, p.space_id, filters, page, self._now())
        return message(found, pb.SessionList())

    @override
    @unary
    async def Graph(self, request: pb.GraphRequest, context: RpcContext) -> pb.GraphAnswer:
        who, p = await self._caller(context), params(SpaceParams, request)
        found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                    reads.graph, who.tenant, p.space_id, self._at(p))
        return message(found, pb.GraphAnswer())

    @override
    @unary
    async def Neighbours(self, request: pb.NeighboursRequest, context: RpcContext
                         ) -> pb.NeighboursAnswer:
        who, p = await self._caller(context), params(EntityParams, request)
        at, found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                        reads.neighbours, who.tenant, p.space_id,
                                        p.entity_id, p.depth, self._at(p))
        if found is None:
            with refusing():
                raise reads.no_entity(p.entity_id, p.space_id, at)
        return message(found, pb.NeighboursAnswer())

    @override
    @unary
    async def ItemsMentioning(self, request: pb.ItemsMentioningRequest, context: RpcContext
                              ) -> pb.ItemList:
        who, p = await self._caller(context), params(EntityParams, request)
        at, found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                        reads.mentioning, who.tenant, p.space_id,
                                        p.entity_id, self._at(p), p.limit)
        if found is None:
            with refusing():
                raise reads.no_entity(p.entity_id, p.space_id, at)
        return message(ItemList(basis=at, items=found), pb.ItemList())

    @override
    @unary
    async def ListSpaces(self, request: pb.ListSpacesRequest, context: RpcContext
                         ) -> pb.SpaceList:
        who, p = await self._caller(context), params(SpacesParams, request)
        page = listing.Page(p.as_of_position, p.limit, p.after or "", self._now())
        found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                    listing.spaces, who.tenant, None, p.status, page)
        return message(found, pb.SpaceList())

    @override
    @unary
    async def ListAgents(self, request: pb.ListAgentsRequest, context: RpcContext
                         ) -> pb.AgentList:
        who, p = await self._caller(context), params(AgentsParams, request)
        page = listing.Page(p.as_of_position, p.limit, p.after or "", self._now())
        found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                    listing.agents, who.tenant, page)
        return message(found, pb.AgentList())

    @override
    @unary
    async def ListErasures(self, request: pb.ListErasuresRequest, context: RpcContext
                           ) -> pb.ErasureList:
        who, p = await self._caller(context), params(ErasuresParams, request)
        if not who.may("admin"):
            raise refusal(403, "forbidden", "erasure receipts need an admin key",
                          "metadata.authorization")
        found = await self._visible(None, 0, listing.erasures, self._reader.base_schema,
                                    who.tenant, p.limit)
        return message(found, pb.ErasureList())

    @override
    @unary
    async def SpaceStats(self, request: pb.SpaceStatsRequest, context: RpcContext
                         ) -> pb.SpaceStatsAnswer:
        who, p = await self._caller(context), params(StatsParams, request)
        found = await self._visible(p.min_position, p.wait_ms, stats.stats, who.tenant,
                                    p.space_id, self._now())
        return message(found, pb.SpaceStatsAnswer())

    @override
    @unary
    async def VectorsSummary(self, request: pb.VectorsSummaryRequest, context: RpcContext
                             ) -> pb.VectorSummary:
        who, p = await self._caller(context), params(SummaryParams, request)
        s = self._semantic
        with refusing():
            found = await vector_summary.summary(s.index, s.progress, s.reader, s.run, who,
                                                 p.as_of_position, p.wait_ms)
        return message(found, pb.VectorSummary())

    @override
    @unary
    async def GetRetrieval(self, request: pb.RetrievalRequest, context: RpcContext
                           ) -> pb.RetrievalRecord:
        who, p = await self._caller(context), params(RetrievalParams, request)
        with refusing():
            found = await retrieval_http.recorded(self._reader, who, p.retrieval_id,
                                                  Visible(p.min_position, p.wait_ms))
        return message(found, pb.RetrievalRecord())

    @override
    @unary
    async def ReplayRetrieval(self, request: pb.RetrievalRequest, context: RpcContext
                              ) -> pb.RetrievalReplay:
        who, p = await self._caller(context), params(RetrievalParams, request)
        with refusing():
            record = await retrieval_http.recorded(self._reader, who, p.retrieval_id,
                                                   Visible(p.min_position, p.wait_ms))
            found = await retrieval_http.replayed(self._semantic, who.tenant, record)
        return message(found, pb.RetrievalReplay())

    @override
    @unary
    async def Chain(self, request: pb.ChainRequest, context: RpcContext) -> pb.ChainAnswer:
        who, p = await self._caller(context), params(ItemParams, request)
        with refusing():
            item = uuid_of(p.item_id, "item_id")
        found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                    lifecycle_http._chain, who.tenant, p.space_id, item,
                                    At(self._now(), p.as_of_position))
        if found is None:
            raise refusal(404, "not_found", f"memory item {item!r} not found in "
                          f"{p.space_id!r}")
        return message(found, pb.ChainAnswer())

    @override
    @unary
    async def Policies(self, request: pb.PoliciesRequest, context: RpcContext
                       ) -> pb.PolicyHistory:
        who, p = await self._caller(context), params(LifecycleParams, request)
        found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                    lifecycle_http._policies, who.tenant, p.space_id,
                                    At(self._now(), p.as_of_position))
        return message(found, pb.PolicyHistory())

    @override
    @unary
    async def MergeSuggestions(self, request: pb.MergeSuggestionsRequest, context: RpcContext
                               ) -> pb.MergeSuggestionList:
        who, p = await self._caller(context), params(LifecycleParams, request)
        found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                    lifecycle_http._suggestions, who.tenant, p.space_id,
                                    At(self._now(), p.as_of_position), p.limit)
        return message(found, pb.MergeSuggestionList())

    @override
    @unary
    async def Profile(self, request: pb.ProfileRequest, context: RpcContext
                      ) -> pb.ProfileAnswer:
        who, p = await self._caller(context), params(ProfileParams, request)
        found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                    forming_http._profile, who.tenant, p.space_id, p.subject,
                                    self._at(p))
        return message(found, pb.ProfileAnswer())

    @override
    @unary
    async def Themes(self, request: pb.ThemesRequest, context: RpcContext) -> pb.ThemeList:
        who, p = await self._caller(context), params(SpaceParams, request)
        found = await self._visible(needs(p.min_position, p.as_of_position), p.wait_ms,
                                    forming_http._themes, who.tenant, p.space_id,
                                    At(self._now(), p.as_of_position, p.recorded_at))
        return message(found, pb.ThemeList())


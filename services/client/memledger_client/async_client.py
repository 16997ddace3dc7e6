"""``AsyncClient``: the asyncio client (httpx), the same API as ``Client`` with ``await``."""

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, Unpack
from uuid import UUID

import httpx

from memledger_client import calls, calls_audit
from memledger_client.admin_writes import AdminWriteMethods
from memledger_client.calls import (
    AsOf,
    Call,
    Consistency,
    ContextOptions,
    ItemFilters,
    SearchOptions,
    SessionFilters,
)
from memledger_client.core import DEFAULT_URL, Core, Resilience
from memledger_client.degrade import Group
from memledger_client.errors import Unavailable
from memledger_client.results import (
    AgentList,
    BatchResult,
    ChainAnswer,
    Change,
    ChangePage,
    ContextAnswer,
    Conversation,
    ErasureList,
    Graph,
    History,
    ItemAnswer,
    ItemList,
    MergeSuggestions,
    Neighbours,
    PolicyHistory,
    ProfileAnswer,
    ReplayAnswer,
    RetrievalRecord,
    SearchAnswer,
    SessionList,
    SpaceList,
    SpaceStats,
    SubjectErasure,
    ThemeList,
    VectorSummary,
    WriteResult,
)
from memledger_client.retry import RetryPolicy
from memledger_schemas.commands import CommandBase

T = TypeVar("T")


class AsyncClient(AdminWriteMethods[Awaitable[WriteResult]]):
    """memledger over HTTP, for asyncio: ``async with AsyncClient(base_url, tenant=...,
    api_key=...)``, or ``await aclose()``. ``transport`` (an ``httpx`` async transport) is for
    tests and proxies; ``sleep`` is how the retry backoff waits; ``resilience`` sets the
    circuit breakers and the stale cache (``memledger_client.degrade``)."""

    def __init__(self, base_url: str = DEFAULT_URL, *, tenant: str | None = None,
                 api_key: str | None = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None,
                 read_your_writes: bool = True, headers: dict[str, str] | None = None,
                 transport: httpx.AsyncBaseTransport | None = None,
                 resilience: Resilience | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._core = Core(base_url, tenant, retry or RetryPolicy(), read_your_writes,
                          resilience or Resilience())
        self._http = httpx.AsyncClient(base_url=self._core.base_url, timeout=timeout,
                                       headers=self._core.headers(api_key, headers),
                                       transport=transport)
        self._sleep = sleep

    @property
    def position(self) -> int:
        """The highest global position this client's writes returned (0: none yet)."""
        return self._core.position

    @property
    def base_url(self) -> str:
        return self._core.base_url

    def breaker_state(self, group: Group) -> str:
        """The circuit breaker of ``group`` (write, read, recall): closed, open, half-open."""
        return self._core.breaker_state(group)

    async def call(self, call: Call[T]) -> T:
        """Send ``call``, retrying transient failures; its parsed answer, or a
        ``MemledgerError`` (a recall memledger cannot answer now is answered from the stale
        cache, when there is one and it holds the same request)."""
        try:
            return await self._attempts(call)
        except Unavailable as error:
            return self._core.stale(call, error)

    async def _attempts(self, call: Call[T]) -> T:
        request = self._core.build(self._http, call)
        attempt = 1
        while True:
            self._core.admit(call)
            try:
                response = await self._http.send(request)
            except httpx.TransportError as error:
                await self._sleep(self._core.after_error(error, attempt, call))
            else:
                delay = self._core.after_response(response, attempt, call)
                if delay is None:
                    return self._core.finish(call, response)
                await self._sleep(delay)
            attempt += 1

    # --- writes (shortcuts in WriteMethods) ---------------------------------------------------

    async def send(self, command: CommandBase) -> WriteResult:
        """Any command of ``memledger_schemas.commands`` on its own route."""
        return await self.call(calls.write(command))

    async def batch(self, commands: Sequence[CommandBase]) -> BatchResult:
        return await self.call(calls.batch(commands))

    # --- reads --------------------------------------------------------------------------------

    async def item(self, space_id: str, item_id: UUID | str, *,
                   source: Literal["projection", "replay"] = "projection",
                   **at: Unpack[AsOf]) -> ItemAnswer:
        return await self.call(calls.item(space_id, item_id, source, at))

    async def items(self, space_id: str, **filters: Unpack[ItemFilters]) -> ItemList:
        return await self.call(calls.items(space_id, filters))

    async def history(self, space_id: str, item_id: UUID | str, *,
                      as_of_position: int | None = None,
                      **consistency: Unpack[Consistency]) -> History:
        return await self.call(calls.history(space_id, item_id, as_of_position, consistency))

    async def changes(self, space_id: str | None = None, *, after: str | None = None,
                      since: datetime | None = None, limit: int = 100,
                      **consistency: Unpack[Consistency]) -> ChangePage:
        """One page of changes strictly after cursor ``after`` (or time ``since``); resume
        from ``next_cursor``. ``space_id`` None: the whole tenant."""
        return await self.call(calls.changes(space_id, after, since, limit, consistency))

    async def iter_changes(self, space_id: str | None = None, *, after: str | None = None,
                           since: datetime | None = None, limit: int = 100
                           ) -> AsyncIterator[Change]:
        """Every change after ``after``/``since`` up to the end of the feed, page by page."""
        page = await self.changes(space_id, after=after, since=since, limit=limit)
        while page.changes:
            for change in page.changes:
                yield change
            page = await self.changes(space_id, after=page.next_cursor, limit=limit)

    async def messages(self, space_id: str, session_id: UUID | str, *,
                       as_of_position: int | None = None, limit: int = 200,
                       **consistency: Unpack[Consistency]) -> Conversation:
        return await self.call(calls.messages(space_id, session_id, as_of_position, limit,
                                              consistency))

    async def sessions(self, space_id: str, **filters: Unpack[SessionFilters]) -> SessionList:
        """A page of the space's sessions, most recently started first (pass
        ``next_cursor`` as ``after`` for the next)."""
        return await self.call(calls.sessions(space_id, filters))

    async def graph(self, space_id: str, **at: Unpack[AsOf]) -> Graph:
        """The space's entities and relations at a (valid, system) point (default: now)."""
        return await self.call(calls.graph(space_id, at))

    async def neighbours(self, space_id: str, entity_id: str, *, depth: int = 1,
                         **at: Unpack[AsOf]) -> Neighbours:
        """The entities up to ``depth`` relations away from ``entity_id`` and the relations
        walked to reach them."""
        return await self.call(calls.neighbours(space_id, entity_id, depth, at))

    async def policies(self, space_id: str, *, as_of_position: int | None = None,
                       **consistency: Unpack[Consistency]) -> PolicyHistory:
        """Every policy version of the space, oldest first (the last one governs)."""
        return await self.call(calls.policies(space_id, as_of_position, consistency))

    async def space_stats(self, space_id: str, **consistency: Unpack[Consistency]) -> SpaceStats:
        """Counts of what the space holds: items by kind and status, its most used tags,
        sessions, messages, entities and relations."""
        return await self.call(calls.space_stats(space_id, consistency))

    async def profile(self, space_id: str, subject: str, **at: Unpack[AsOf]) -> ProfileAnswer:
        """What is believed about ``subject`` (a person's or agent's name) in the space: the
        facts and preferences whose triple subject it is, with confidence and sources."""
        return await self.call(calls.profile(space_id, subject, at))

    async def themes(self, space_id: str, *, as_of_position: int | None = None,
                     recorded_at: datetime | None = None,
                     **consistency: Unpack[Consistency]) -> ThemeList:
        """The themes the space's memories form (a policy's ``theme_cosine`` turns them
        on), the largest first, as of a position or a time (default: latest)."""
        return await self.call(calls.themes(space_id, as_of_position, recorded_at, consistency))

    async def search(self, query: str, **options: Unpack[SearchOptions]) -> SearchAnswer:
        return await self.call(calls.search(query, options))

    async def context(self, space_id: str, **options: Unpack[ContextOptions]) -> ContextAnswer:
        return await self.call(calls.context(space_id, options))

    async def spaces(self, *, as_of_position: int | None = None, status: str | None = None,
                 limit: int = 100, after: str | None = None,
                 **consistency: Unpack[Consistency]) -> SpaceList:
        """A page of spaces (``next_cursor`` as ``after`` for the next)."""
        return await self.call(calls.spaces(as_of_position, status, limit, after, consistency))

    async def agents(self, *, as_of_position: int | None = None, limit: int = 100,
                 after: str | None = None, **consistency: Unpack[Consistency]) -> AgentList:
        """A page of agents (``next_cursor`` as ``after`` for the next)."""
        return await self.call(calls.agents(as_of_position, limit, after, consistency))

    async def erasures(self, *, limit: int = 100) -> ErasureList:
        """The last erasure receipts, newest first."""
        return await self.call(calls.erasures(limit))

    async def health(self) -> dict[str, Any]:
        return await self.call(calls.health())

    # --- lifecycle reads, the audit, erasure (calls_audit) -------------------------------------

    async def chain(self, space_id: str, item_id: UUID | str, *, as_of_position: int | None = None,
              **consistency: Unpack[Consistency]) -> ChainAnswer:
        """The supersession chain of an item: what it replaced and what replaced it."""
        return await self.call(calls_audit.chain(space_id, str(item_id), as_of_position,
                                           consistency))

    async def merge_suggestions(self, space_id: str, *, as_of_position: int | None = None,
                          limit: int = 100, **consistency: Unpack[Consistency]
                          ) -> MergeSuggestions:
        """The merges consolidation suggested in the space."""
        return await self.call(calls_audit.merge_suggestions(space_id, as_of_position, limit,
                                                       consistency))

    async def items_mentioning(self, space_id: str, entity_id: str, *, limit: int = 100,
                         **at: Unpack[AsOf]) -> ItemList:
        """The items that mention ``entity_id``."""
        return await self.call(calls_audit.items_mentioning(space_id, entity_id, limit, at))

    async def retrieval(self, retrieval_id: UUID | str, **consistency: Unpack[Consistency]
                  ) -> RetrievalRecord:
        """What an audited search or context call (its ``retrieval_id``) showed."""
        return await self.call(calls_audit.retrieval(str(retrieval_id), consistency))

    async def replay_retrieval(self, retrieval_id: UUID | str,
                         **consistency: Unpack[Consistency]) -> ReplayAnswer:
        """An audited call run again at its recorded basis, with its differences."""
        return await self.call(calls_audit.replay_retrieval(str(retrieval_id), consistency))

    async def vectors_summary(self, *, as_of_position: int | None = None,
                        wait_ms: int | None = None) -> VectorSummary:
        """The vector read model's digest per space (an admin key)."""
        return await self.call(calls_audit.vectors_summary(as_of_position, wait_ms))

    async def erase_subject(self, subject_id: str, *, reason: str | None = None) -> SubjectErasure:
        """Erase a data subject (an admin key; where personal data is sealed)."""
        return await self.call(calls_audit.erase_subject(subject_id, reason))

    async def query_health(self) -> dict[str, Any]:
        """The query service's health (``health`` is ingest's)."""
        return await self.call(calls_audit.query_health())

    # --- lifecycle ----------------------------------------------------------------------------

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.aclose()

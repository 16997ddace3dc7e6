"""HTTP for semantic memory: ``POST /v1/search`` and ``POST /v1/context``.

Both answer from the vector read model (current, or as of ``valid_at`` / ``as_of_position``)
with their basis; recency decay is computed at the basis' valid time and feedback counted up to
the basis' position, so passing the basis back (``valid_at`` and ``as_of_position``) repeats a
ranking exactly. An audited call is recorded before it is answered (``retrievals``).
"""

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ParamSpec, TypeVar
from uuid import UUID

from fastapi import APIRouter, Query
from fastapi.responses import Response

from memledger_platform.auth import Denied, Principal, require
from memledger_platform.clock import Clock, SystemClock
from memledger_platform.embedding.embedder import Embedder
from memledger_platform.vectorindex.port import MESSAGE_KIND as MESSAGE
from memledger_platform.vectorindex.port import MESSAGE_LAYER as CONVERSATION
from memledger_platform.vectorindex.port import OPEN, Scope, VectorIndex
from memledger_query.core import (
    anchors,
    context_views,
    forming_context,
    message_views,
    retrievals,
    signal_views,
    steering,
    vector_summary,
    views,
    when,
)
from memledger_query.core import context as packing
from memledger_query.core.degrade import BoundedEmbedding, ranking
from memledger_query.core.index_progress import Progress
from memledger_query.core.ranking import MODES, Ranked, Recipe, policy_version
from memledger_query.core.reader import NotYetVisible, Reader
from memledger_query.core.recorder import NoRecorder, Recorder
from memledger_query.core.semantic import (
    Layer,
    Periods,
    QueryVector,
    Refinements,
    Rerank,
    SignalLookup,
)
from memledger_query.core.semantic import search as semantic_search
from memledger_query.entrypoints import api
from memledger_query.entrypoints.api import (
    RETRY_AFTER_SECONDS,
    Caller,
    KeyHolder,
    Problem,
    json_answer,
    within_head,
)
from memledger_query.entrypoints.forming_http import theme_members
from memledger_schemas.api.reads import Basis
from memledger_schemas.api.semantic import (
    ContextAnswer,
    ContextEntry,
    ContextRequest,
    ContextSection,
    SearchAnswer,
    SearchHit,
    SearchRequest,
    TimeTravel,
    TimeWindow,
    Window,
)
from memledger_schemas.api.vectors import GRAPH_PATH, SUMMARY_PATH, VectorGraph, VectorSummary

_QUERY_CACHE = 2_048
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SEARCH_THREADS = 4
"""Searches and context packs answered at once (the vector index's engine runs one call at a time;
the rest of a search, ranking and feedback lookups, runs beside it)."""
P = ParamSpec("P")
T = TypeVar("T")


@dataclass
class Semantic:
    index: VectorIndex
    embedder: Embedder
    progress: Progress
    reader: Reader
    recipe: Recipe = field(default_factory=Recipe)
    recorder: Recorder = field(default_factory=NoRecorder)
    """Where audited retrievals are recorded (through ingest)."""
    rerank: Rerank | None = None
    """A reranker of each layer's best hits (none: off)."""
    embed_timeout: float = 1.5
    """How long a search waits for its query's embedding before ranking by keywords alone
    (``degrade``)."""
    clock: Clock = field(default_factory=SystemClock)
    """What "now" is: the valid time of a search or context call that names none."""

    def __post_init__(self) -> None:
        self.embed_query: Callable[[str], tuple[float, ...]] = functools.lru_cache(
            _QUERY_CACHE)(lambda text: tuple(self.embedder.embed_query(text)))
        # Query embeddings run beside the rest of a search (the model releases the GIL).
        self._embedding = ThreadPoolExecutor(2, "query-embedding")
        # Searches wait on the vector index, which an HNSW build holds for seconds: in a
        # pool of their own, they never hold the threads that reads and writes run in.
        self._searching = ThreadPoolExecutor(SEARCH_THREADS, "search")

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn`` in the search pool (as ``asyncio.to_thread`` would, context and all)."""
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._searching, call)

    def periods_soon(self, query: str, at: datetime) -> "Future[tuple[when.Period, ...]]":
        """The periods ``query`` names at ``at``, under way (none if time does not count): the
        date parser runs while the index is read (it holds the GIL; the index's process and
        the model do not)."""
        if self.recipe.time_weight <= 0:
            done: Future[tuple[when.Period, ...]] = Future()
            done.set_result(())
            return done
        return self._embedding.submit(when.resolve, query, at)

    def embed_soon(self, body: SearchRequest) -> BoundedEmbedding | None:
        """The query's embedding, under way (``None`` if the search does not rank by it)."""
        if body.weights is not None and body.weights.dense <= 0:
            return None
        return self.bounded_embedding(body.query)

    def bounded_embedding(self, text: str) -> BoundedEmbedding:
        """``text``'s embedding, under way, waited for at most ``embed_timeout`` from now."""
        return BoundedEmbedding(self._embedding.submit(self.embed_query, text),
                                time.monotonic() + self.embed_timeout)


def router(semantic: Semantic) -> APIRouter:
    """Search, context and the vector digest (the query app's middleware has authenticated
    the caller)."""
    routes = api.router()

    @routes.post("/v1/search", response_model=SearchAnswer)
    async def search(body: SearchRequest, who: Caller) -> Response:
        return json_answer(await answer_search(semantic, who.tenant, _actor(who),
                                               _within_grants(who, body),
                                               sorted(who.spaces or ())))

    @routes.post("/v1/context", response_model=ContextAnswer)
    async def context(body: ContextRequest, who: Caller) -> Response:
        _allowed(who, [body.space_id], "body.space_id")
        return json_answer(await answer_context(semantic, who.tenant, _actor(who), body))

    @routes.get(SUMMARY_PATH, response_model=VectorSummary)
    async def vectors_summary(
            who: KeyHolder, as_of_position: Annotated[int | None, Query(ge=0)] = None,
            wait_ms: Annotated[int, Query(ge=0, le=30_000)] = 2_000) -> VectorSummary:
        return await vector_summary.summary(semantic.index, semantic.progress, semantic.reader,
                                            semantic.run, who, as_of_position, wait_ms)

    @routes.get(GRAPH_PATH, response_model=VectorGraph)
    async def vectors_graph(who: KeyHolder) -> VectorGraph:
        try:
            require(who, "admin")
        except Denied as denied:
            raise Problem(denied.status, denied.code, denied.message, denied.path) from None
        state = await semantic.run(semantic.index.graph)
        return VectorGraph(points=state.points, indexed=state.indexed, building=state.building)

    return routes


async def answer_search(semantic: Semantic, tenant: str, actor: str, body: SearchRequest,
                        granted: Sequence[str] = ()) -> SearchAnswer:
    """A search answered at its basis (once the read models reach it: the feedback it ranks
    by), and recorded before it is answered if audited."""
    # The query's embedding (the longest part of a search) depends on neither the basis nor
    # the audit policy: it is computed while they are waited for and looked up.
    vector = semantic.embed_soon(body)
    try:
        at = await _basis(semantic, body)
        periods = semantic.periods_soon(body.query, at.valid_at)
        await _wait_read_model(semantic, body, at)
        audit, body, answer = await semantic.run(_search_as_audited, semantic, tenant,
                                                 body, at, granted, (vector, periods))
    finally:
        if vector is not None:
            vector.future.cancel()  # unless under way (a refused request does not wait)
    if not audit:
        return answer
    return await retrievals.record_search(semantic.recorder, tenant, actor, body, granted,
                                          answer, _policy(semantic))


async def answer_context(semantic: Semantic, tenant: str, actor: str, body: ContextRequest
                         ) -> ContextAnswer:
    """A context bundle packed at its basis, and recorded before it is answered if audited."""
    at = await _basis(semantic, body)
    await _wait_read_model(semantic, body, at)
    audit = await retrievals.wanted(semantic.reader, tenant, body.audit, [body.space_id])
    body = retrievals.pinned(body, at) if audit else body
    answer = await semantic.run(_context, semantic, tenant, body, at)
    if not audit:
        return answer
    return await retrievals.record_context(semantic.recorder, tenant, actor, body, answer,
                                           _policy(semantic))


def _actor(who: Principal) -> str:
    return f"key:{who.key_id or 'local'}"


def _policy(semantic: Semantic) -> str:
    models = semantic.embedder.model_id
    if semantic.rerank is not None:
        models += f" reranked by {semantic.rerank.reranker.model_id}/{semantic.rerank.depth}"
    return policy_version(semantic.recipe, models)


def _within_grants(who: Principal, body: SearchRequest) -> SearchRequest:
    """The search narrowed to the spaces the key may read: all of the tenant's when it is not
    limited (every space named must then be granted)."""
    _allowed(who, body.spaces, "body.spaces")
    if who.spaces is None or body.spaces:
        return body
    return body.model_copy(update={"spaces": sorted(who.spaces)})


def _allowed(who: Principal, spaces: Sequence[str], path: str) -> None:
    try:
        require(who, "read", spaces, path=path)
    except Denied as denied:
        raise Problem(denied.status, denied.code, denied.message, denied.path) from None


async def _basis(semantic: Semantic, body: TimeTravel) -> Basis:
    """Wait for the index to reach what the request names, then fix the basis."""
    await within_head(semantic.reader, "body.", {"as_of_position": body.as_of_position,
                                                 "min_position": body.min_position})
    wanted = max([p for p in (body.min_position, body.as_of_position) if p is not None],
                 default=None)
    if wanted is not None and not await semantic.progress.wait_for(wanted, body.wait_ms / 1000):
        reached = await semantic.progress.reached()
        raise Problem(503, "not_yet_visible", f"the vector index reached position {reached}, "
                      f"not {wanted}, in time", "body.min_position", projected_position=reached,
                      retry_after_seconds=RETRY_AFTER_SECONDS)
    valid_at = body.valid_at or semantic.clock.now()
    position, recorded_at = body.as_of_position, None
    if body.recorded_at is not None and position is None:
        found = await asyncio.to_thread(semantic.reader.run, views.basis, valid_at, None,
                                        body.recorded_at)
        position, recorded_at = found.position, found.recorded_at
    if position is None:
        position = await semantic.progress.reached()
    return Basis(position=position, recorded_at=recorded_at, valid_at=valid_at)


async def _wait_read_model(semantic: Semantic, body: TimeTravel, at: Basis) -> None:
    try:
        await semantic.reader.wait_for(max(at.position, body.min_position or 0), body.wait_ms)
    except NotYetVisible as late:
        raise Problem(503, "not_yet_visible", str(late), "body.min_position",
                      projected_position=late.reached,
                      retry_after_seconds=RETRY_AFTER_SECONDS) from None


# --- search -----------------------------------------------------------------------------------

def _search_as_audited(semantic: Semantic, tenant: str, body: SearchRequest, at: Basis,
                       granted: Sequence[str], under_way: tuple[
                           BoundedEmbedding | None, "Future[tuple[when.Period, ...]]"]
                       ) -> tuple[bool, SearchRequest, SearchAnswer]:
    """Whether the search is audited, the request it runs (pinned to its basis if so) and its
    answer: one trip to a worker thread for the policy lookup and the search. ``under_way``:
    the query's embedding and the periods it names, being computed."""
    audit, signalled = retrievals.search_gates_now(semantic.reader, tenant, body.audit,
                                                   body.spaces)
    body = retrievals.pinned(body, at) if audit else body
    vector, periods = under_way
    return audit, body, _search(semantic, tenant, body, at, granted, vector,
                                signalled=signalled, periods=periods.result)


def _search(semantic: Semantic, tenant: str, body: SearchRequest, at: Basis,
            granted: Sequence[str] = (), vector: QueryVector = None, *,
            signalled: bool = True, periods: Periods | None = None) -> SearchAnswer:
    """``granted``: the spaces a limited key may read (empty: the whole tenant), which bound
    the ecosystem layer. ``vector``: the query's embedding, if under way already (else it is
    computed here, within the embed timeout; without it, keywords alone rank: ``degrade``).
    ``signalled``: whether the tenant has any feedback (if not, none is looked up).
    ``periods``: the periods the query names, if under way already."""
    mode = MODES[body.mode]
    threshold = mode.threshold if body.threshold is None else body.threshold
    recipe = _recipe(semantic.recipe, body)
    if vector is None and recipe.dense_weight > 0:
        vector = semantic.bounded_embedding(body.query)
    members = theme_members(semantic.reader, tenant, body.theme, at) if body.theme else ()
    layers = _layers(tenant, body, at, body.k or mode.k, granted, members)
    named = _Times(_named(body.query, at, recipe, periods),
                   _anchoring(semantic, body.query, recipe, [layer.scope for layer in layers]))
    found = semantic_search(semantic.index, vector, body.query, layers, recipe,
                            threshold=threshold, now=at.valid_at.timestamp(),
                            refine=Refinements(
                                subject=body.subject,
                                signals=_signals(semantic, tenant, at, recipe, signalled),
                                periods=named, rerank=semantic.rerank))
    ranked = [r for layer in found for r in layer.hits]
    windows = _windows(semantic, tenant, ranked, body.window, at) if body.window > 0 else {}
    times = named()
    hits = [_hit(r, _explained(r, named.resolved) if body.explain else None,
                 windows.get(r.candidate.item_id)) for r in ranked]
    collapsed = {k: v for layer in found for k, v in layer.collapsed.items()}
    degraded = vector.degraded if isinstance(vector, BoundedEmbedding) else []
    return SearchAnswer(basis=at, mode=body.mode, threshold=threshold,
                        model=semantic.embedder.model_id, results=hits, collapsed=collapsed,
                        time_windows=[TimeWindow.of(p) for p in times],
                        ranking=ranking(recipe.dense_weight, recipe.keyword_weight, degraded),
                        degraded=degraded)


def _named(query: str, at: Basis, recipe: Recipe, under_way: Periods | None
           ) -> Callable[[], tuple[when.Period, ...]]:
    """The periods ``query`` names (none when time does not count), resolved once, when
    first asked: ``under_way`` if given, else here."""
    if recipe.time_weight <= 0:
        return lambda: ()
    if under_way is None:
        return functools.cache(lambda: when.resolve(query, at.valid_at))
    return functools.cache(under_way) if callable(under_way) else (lambda: under_way)


@dataclass
class _Times:
    """The periods a query names and the window of its event-relative expression, resolved
    once, when first asked (after the search's candidates are fetched: the date parser runs
    meanwhile, and an expression whose words it resolved is its own, not an event's)."""

    named: Callable[[], tuple[when.Period, ...]]
    anchoring: Callable[[Sequence[str]], anchors.Resolved | None]
    resolved: anchors.Resolved | None = None
    _found: tuple[when.Period, ...] | None = None

    def __call__(self) -> tuple[when.Period, ...]:
        if self._found is None:
            named = self.named()
            self.resolved = self.anchoring([p.text for p in named])
            window = None if self.resolved is None else self.resolved.period
            self._found = named if window is None else (*named, window)
        return self._found


def _anchoring(semantic: Semantic, query: str, recipe: Recipe, scopes: Sequence[Scope]
               ) -> Callable[[Sequence[str]], anchors.Resolved | None]:
    """How the query's event-relative expression is resolved, if it has one (``anchors``):
    one keyword search of the search's scopes; none for a relation whose weight is 0."""
    def resolve(named: Sequence[str]) -> anchors.Resolved | None:
        relations = [r for r in anchors.RELATIONS if recipe.anchor_weight_of(r) > 0]
        relative = anchors.find(query, named, relations) if relations else None
        if relative is None:
            return None
        return anchors.resolve(semantic.index, scopes, relative, recipe)
    return resolve


def _explained(ranked: Ranked, resolved: anchors.Resolved | None) -> dict[str, float]:
    """``ranked``'s explanation, with whether the query's event-relative expression resolved
    and the best keyword relevance its anchor search found (against ``anchor_bar``)."""
    if resolved is None:
        return ranked.explain
    return {**ranked.explain, "anchor_resolved": float(resolved.period is not None),
            "anchor_relevance": round(resolved.best, 6)}


def _recipe(recipe: Recipe, body: SearchRequest) -> Recipe:
    """The recipe with the request's weights, which set both what is kept (relevance) and the
    order; without any, relevance keeps its calibrated weights and the order its measured
    ones. (A recorded request says which it was, so its replay ranks the same.)"""
    if body.weights is None:
        return recipe
    dense, keyword = body.weights.dense, body.weights.keyword
    return replace(recipe, dense_weight=dense, keyword_weight=keyword,
                   order_dense_weight=dense, order_keyword_weight=keyword)


def _signals(semantic: Semantic, tenant: str, at: Basis, recipe: Recipe, signalled: bool
             ) -> SignalLookup | None:
    """The candidates' feedback as of the basis (not looked up when utility does not count,
    nor for a tenant without any feedback)."""
    if recipe.utility_weight <= 0 or not signalled:
        return None
    return lambda ids: semantic.reader.run(signal_views.signals, tenant, ids, at.position)


def _layers(tenant: str, body: SearchRequest, at: Basis, k: int, granted: Sequence[str],
            members: tuple[str, ...] = ()) -> list[Layer]:
    """Session memory is found only by naming its session: never in a project's or the
    ecosystem's results unless promoted (``memory.promoted``). Messages are found with the
    project's memory (layer "conversation"), and by naming their session."""
    def scope(spaces: Sequence[str], session: UUID | None, layers: tuple[str, ...]) -> Scope:
        return Scope(tenant=tenant, valid_at=at.valid_at.timestamp(),
                     position=body.as_of_position if body.as_of_position is not None
                     else (at.position if body.recorded_at is not None else None),
                     head=at.position,
                     spaces=tuple(spaces), kinds=tuple(body.kinds), tags=tuple(body.tags),
                     session=None if session is None else str(session), agent=body.agent_id,
                     layers=layers, roles=body.roles, participant=body.participant,
                     items=members)

    if body.scope == "filtered":
        layers = () if body.session_id is not None else ("project", CONVERSATION, "ecosystem")
        return [Layer("filtered", scope(body.spaces, body.session_id, layers), k)]
    limits, session = body.layers, str(body.session_id)
    return [Layer("session", scope(body.spaces, body.session_id, ()), limits.session),
            Layer("project", scope(body.spaces, None, ("project",)), limits.project),
            Layer(CONVERSATION, scope(body.spaces, None, (CONVERSATION,)),
                  limits.conversation, other_than_session=session),
            Layer("ecosystem", scope(granted, None, ("ecosystem",)), limits.ecosystem)]


def _hit(ranked: Ranked, explain: dict[str, float] | None, window: Window | None = None
         ) -> SearchHit:
    p = ranked.candidate.payload
    said = p["kind"] == MESSAGE
    return SearchHit(
        item_id=ranked.candidate.item_id, space_id=p["space"], kind=p["kind"],
        content=p["content"], tags=list(p.get("tags") or ()), importance=p["importance"],
        confidence=p["confidence"], session_id=p.get("session"), agent_id=p.get("agent"),
        valid_from=p["valid_from"], valid_to=None if p["valid_to"] >= OPEN else p["valid_to"],
        layer=ranked.candidate.layer, score=round(ranked.score, 6),
        relevance=round(ranked.relevance, 6), explain=explain,
        message_id=ranked.candidate.item_id if said else None,
        role=p.get("role") if said else None, participant=p.get("participant"),
        said_at=_EPOCH + timedelta(seconds=p["valid_from"]) if said else None, window=window)


def _windows(semantic: Semantic, tenant: str, ranked: Sequence[Ranked], n: int, at: Basis
             ) -> dict[str, Window]:
    """The ``n`` turns before and after each message hit, by message id (one read for all)."""
    said = [message_views.Said(r.candidate.item_id, str(p["session"]), int(p["sys_from"]))
            for r in ranked if (p := r.candidate.payload)["kind"] == MESSAGE]
    if not said:
        return {}
    found: dict[str, Window] = semantic.reader.run(message_views.windows, tenant, said, n, at)
    return found


# --- context ----------------------------------------------------------------------------------

def _context(semantic: Semantic, tenant: str, body: ContextRequest, at: Basis) -> ContextAnswer:
    reads = semantic.reader.run(_context_reads, tenant, body, at)
    query = body.query or reads["last_user_message"]
    memories: list[packing.Entry] = []
    earlier: list[packing.Entry] = []
    collapsed: dict[str, str] = {}
    ranked: dict[str, Any] = {}
    if query:
        # With a session: its own memory first, then the project's, then the ecosystem's.
        search = SearchRequest(query=query, spaces=[body.space_id], mode="planning",
                               session_id=body.session_id,
                               scope="hierarchical" if body.session_id else "filtered",
                               as_of_position=body.as_of_position, valid_at=at.valid_at)
        answer = _search(semantic, tenant, search, at)
        memories = [packing.Entry(f"- [{h.kind}] {h.content}", h.item_id, h.score)
                    for h in answer.results
                    if h.kind not in ("preference", "steering_rule", MESSAGE)]
        # The session's own turns are its section's; other sessions' get their own.
        earlier = [_turn(h) for h in answer.results if h.kind == MESSAGE
                   and h.session_id != (body.session_id and str(body.session_id))]
        collapsed = answer.collapsed
        ranked = {"ranking": answer.ranking, "degraded": answer.degraded}
    # A steering-rule candidate is offered once, as such, not again as recent history; nor is
    # a near-duplicate of a memory offered.
    offered = {e.ref for e in memories}
    shown = (offered | {e.ref for e in reads["preferences"] if e.flag}
             | {item for item, into in collapsed.items() if into in offered})
    history = [e for e in reads["history"] if e.ref not in shown]
    sections = packing.pack({"session": reads["session"], "memories": memories,
                             "conversations": earlier, "preferences": reads["preferences"],
                             "history": history, "themes": reads["themes"]},
                            body.budget_tokens, body.shares.model_dump())
    return ContextAnswer(
        basis=at, budget_tokens=body.budget_tokens,
        used_tokens=sum(s.used for s in sections), tokenizer=packing.TOKENIZER, query=query,
        sections=[ContextSection(name=s.name, allowance=s.allowance, used_tokens=s.used,
                                 entries=[ContextEntry(text=e.text, ref=e.ref, tokens=e.tokens,
                                                       score=e.score, flag=e.flag)
                                          for e in s.entries])
                  for s in sections],
        rendered=packing.render(sections), **ranked)


def _turn(hit: SearchHit) -> packing.Entry:
    said = f"{hit.said_at:%Y-%m-%d} " if hit.said_at is not None else ""
    return packing.Entry(f"- [{said}{hit.participant or hit.role}] {hit.content}", hit.item_id,
                         hit.score)


def _context_reads(conn: Any, s: str, tenant: str, body: ContextRequest, at: Basis
                   ) -> dict[str, Any]:
    space = body.space_id
    turns: list[packing.Entry] = []
    last_user = None
    if body.session_id is not None:
        talk = views.conversation(conn, s, tenant, space, str(body.session_id), at)
        if talk is None:
            raise Problem(404, "not_found", f"session {body.session_id} not found in {space!r}",
                          "body.session_id")
        turns = [packing.Entry(f"{m.role}: {m.content}", m.message_id)
                 for m in reversed(talk.messages)]
        last_user = next((m.content for m in reversed(talk.messages) if m.role == "user"), None)
    rules = views.items(conn, s, tenant, space, at,
                        views.ItemFilters(kinds=["steering_rule", "preference"]))
    extracted = context_views.extracted_preferences(conn, s, tenant, space, at)
    preferences = (steering.rules_then_candidates(
        rules, steering.candidates(conn, s, tenant, space, at))
                   + [packing.Entry(f"- {p.category}: {p.value}", p.source_item_id,
                                    p.confidence) for p in extracted])
    profiles = forming_context.profile_entries(conn, s, tenant, space, at)
    history = [packing.Entry(f"- [{i.kind}] {i.content}", i.item_id)
               for i in context_views.recent_items(conn, s, tenant, space, at)
               if i.kind not in ("preference", "steering_rule")]
    return {"session": turns, "preferences": preferences + profiles, "history": history,
            "themes": forming_context.theme_entries(conn, s, tenant, space, at),
            "last_user_message": last_user}

"""Semantic search over the vector read model: the query embedded once, dense and keyword
candidates fetched per layer of scope, their feedback looked up once for all layers, then
ranked, cut at the mode's threshold and collapsed (``ranking``). Plain functions over the
``VectorIndex`` port and a signals lookup; HTTP lives in ``semantic_http``.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import Hit, Scope, SparseVector, VectorIndex
from memledger_query.core import when
from memledger_query.core.ranking import (
    Candidate,
    Ranked,
    Recipe,
    Signals,
    VectorLookup,
    collapse,
    complete_dense,
    rank,
)
from memledger_query.core.rerank import Reranker, reorder

OVERFETCH = 4
"""Candidates fetched per result wanted, from each of dense and keyword search: ranking
reorders them, collapse and the subject filter drop some."""
MIN_CANDIDATES = 40

SignalLookup = Callable[[Collection[str]], Mapping[str, Signals]]
"""The feedback of the given item ids (as of the search's basis), by item id."""


@dataclass(frozen=True)
class Rerank:
    """A reranker and how many of a layer's best hits it reorders."""

    reranker: Reranker
    depth: int


@dataclass(frozen=True)
class Layer:
    """One level of a hierarchical search (or the only one of a flat search)."""

    name: str
    scope: Scope
    limit: int
    other_than_session: str | None = None
    """Leave out what belongs to this session (found by an earlier layer of its own)."""


@dataclass(frozen=True)
class Found:
    layer: str
    hits: list[Ranked]
    collapsed: dict[str, str] = field(default_factory=dict)


QueryVector = Sequence[float] | Callable[[], Sequence[float] | None] | None
"""The query's embedding (``None``: dense search off), or a callable waiting for it."""
Periods = tuple[when.Period, ...] | Callable[[], tuple[when.Period, ...]]
"""The periods the query names, or a callable waiting for them."""


@dataclass(frozen=True)
class Refinements:
    """What shapes a search beyond its words, layers and recipe: the ``subject`` its hits must
    be about, the ``signals`` lookup (asked once, for every layer's candidates), the
    ``periods`` the query names, and ``rerank``, which reorders each layer's best hits
    (``rerank.reorder``)."""

    subject: str | None = None
    signals: SignalLookup | None = None
    periods: Periods = ()
    rerank: Rerank | None = None


def search(index: VectorIndex, vector: QueryVector, text: str,
           layers: Sequence[Layer], recipe: Recipe, *, threshold: float, now: float,
           refine: Refinements | None = None) -> list[Found]:
    """Each layer's best hits above ``threshold``; an item found in an earlier layer is not
    repeated in a later one (``refine``: ``Refinements``, none by default). The keyword
    searches come first: an embedding (or periods) still under way is waited for only after
    them."""
    more = refine or Refinements()
    query = sparse.encode_query(text)
    keyword = [_keyword(index, query, layer, recipe) for layer in layers]
    dense = vector() if callable(vector) else vector
    if dense is None and recipe.dense_weight > 0:
        recipe = keyword_only(recipe)  # the embedding was wanted but missing (``degrade``)
    fetched = [[c for c in _candidates(_dense(index, dense, layer), found, layer.name)
                if _about(c, more.subject) and _outside(c, layer.other_than_session)]
               for layer, found in zip(layers, keyword, strict=True)]
    vectors = _vectors_of(index)
    if dense is not None:
        # One lookup for every layer's candidates found by their words alone; collapse
        # reuses the vectors (``_vectors_of``).
        words_only = [c for candidates in fetched for c in candidates if c.dense is None]
        own = vectors(words_only) if words_only else {}
        fetched = [complete_dense(candidates, dense, own) for candidates in fetched]
    named = more.periods() if callable(more.periods) else more.periods
    wanted = {c.item_id for candidates in fetched for c in candidates}
    known = more.signals(wanted) if more.signals is not None and wanted else {}
    seen: set[str] = set()
    found = []
    for layer, candidates in zip(layers, fetched, strict=True):
        fresh = [c for c in candidates if c.item_id not in seen]
        ranked = [r for r in rank(fresh, recipe, now, known, named)
                  if r.relevance >= threshold]
        if more.rerank is not None and ranked:
            ranked = reorder(ranked, text, more.rerank.reranker, more.rerank.depth)
        kept, into = collapse(ranked, recipe, layer.limit, vectors=vectors)
        seen.update(r.candidate.item_id for r in kept)
        found.append(Found(layer.name, kept, into))
    return found


def keyword_only(recipe: Recipe) -> Recipe:
    """``recipe`` ranking by keywords alone: relevance and order are the keyword score."""
    return replace(recipe, dense_weight=0.0, keyword_weight=1.0, order_dense_weight=0.0,
                   order_keyword_weight=1.0)


def _fetched(layer: Layer) -> int:
    return max(layer.limit * OVERFETCH, MIN_CANDIDATES)


def _keyword(index: VectorIndex, query: SparseVector, layer: Layer, recipe: Recipe
             ) -> list[Hit]:
    if recipe.keyword_weight > 0 and query.indices:
        return index.search_sparse(query, layer.scope, _fetched(layer))
    return []


def _dense(index: VectorIndex, vector: Sequence[float] | None, layer: Layer) -> list[Hit]:
    return index.search(vector, layer.scope, _fetched(layer)) if vector is not None else []


def _candidates(dense: list[Hit], keyword: list[Hit], layer: str) -> list[Candidate]:
    """Dense and keyword hits merged by item (at one (valid, system) point an item has at most
    one version, so one point)."""
    merged: dict[str, Candidate] = {}
    for hit in dense:
        item = str(hit.payload["item_id"])
        merged[item] = Candidate(item, hit.payload, dense=hit.score, layer=layer,
                                 point_id=hit.point_id)
    for hit in keyword:
        item = str(hit.payload["item_id"])
        known = merged.get(item)
        merged[item] = Candidate(item, hit.payload, dense=None if known is None else known.dense,
                                 keyword=hit.score, layer=layer, point_id=hit.point_id)
    return list(merged.values())


def _vectors_of(index: VectorIndex) -> VectorLookup:
    """The candidates' vectors from their points (a keyword hit's too: an embedded item found
    by its words alone is collapsed like any other), each point looked up once a search."""
    looked: dict[str, Sequence[float] | None] = {}

    def lookup(candidates: Sequence[Candidate]) -> dict[str, Sequence[float]]:
        items = {c.point_id: c.item_id for c in candidates
                 if c.point_id is not None and c.point_id not in looked}
        if items:
            found = index.vectors(list(items))
            looked.update({point: found.get(point) for point in items})
        return {c.item_id: vector for c in candidates if c.point_id is not None
                and (vector := looked.get(c.point_id)) is not None}
    return lookup


def _outside(candidate: Candidate, session: str | None) -> bool:
    return session is None or candidate.payload.get("session") != session


def _about(candidate: Candidate, subject: str | None) -> bool:
    if subject is None:
        return True
    found = candidate.payload.get("subject")
    return isinstance(found, str) and found.casefold() == subject.casefold()

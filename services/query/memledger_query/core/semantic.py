"""Semantic search over the vector read model: the query embedded once, dense and keyword
candidates fetched per layer of scope, their feedback looked up once for all layers, then
ranked, cut at the mode's threshold and collapsed (``ranking``). Plain functions over the
``VectorIndex`` port and a signals lookup; HTTP lives in ``semantic_http``.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import (
    EMBEDDED_FROM,
    Hit,
    Scope,
    SparseVector,
    Vector,
    VectorIndex,
    seen_at,
    written_by,
)
from memledger_query.core import when
from memledger_query.core.degrade import BoundedEmbedding
from memledger_query.core.ranking import (
    MESSAGE,
    SPARE_VECTORS,
    Candidate,
    Ranked,
    Recipe,
    Signals,
    collapse,
    complete_dense,
    rank,
    rescore,
)
from memledger_query.core.rerank import Reranker, reorder

OVERFETCH = 4
"""Candidates fetched per result wanted, from each of dense and keyword search: ranking
reorders them, collapse and the subject filter drop some."""
MIN_CANDIDATES = 40

RANK_FIELDS = ("item_id", EMBEDDED_FROM, "sys_from", "kind", "session", "content_at",
               "valid_from", "importance", "confidence")
"""What a candidate is fetched with: what ranks it (``ranking.score``, ``embedded_by``, a
session's words), not the whole payload: the index converts, and the socket carries, each
key of each of up to 160 candidates a layer, of which a few are shown (``whole``)."""

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
_Hits = tuple[list[Hit], list[Hit]]
"""A layer's dense hits and keyword hits."""
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
    repeated in a later one (``refine``: ``Refinements``, none by default). Candidates are
    fetched by ``_fetch``; periods still under way are waited for only after them."""
    more = refine or Refinements()
    query = sparse.encode_query(text)
    words = query if recipe.keyword_weight > 0 and query.indices else None
    dense, hits = _fetch(index, vector, words, layers, candidate_fields(layers, recipe, more))
    if dense is None and recipe.dense_weight > 0:
        recipe = keyword_only(recipe)  # the embedding was wanted but missing (``degrade``)
    fetched = [[c for c in _candidates(*found, layer)
                if _about(c, more.subject) and _outside(c, layer.other_than_session)]
               for layer, found in zip(layers, hits, strict=True)]
    named = more.periods() if callable(more.periods) else more.periods
    wanted = {c.item_id for candidates in fetched for c in candidates}
    known = more.signals(wanted) if more.signals is not None and wanted else {}
    vectors = _Vectors(index, seen_at(layers[0].scope) if layers else None)
    ranker = _Ranker(recipe, now, threshold, known, named, dense, vectors)
    seen: set[str] = set()
    found = []
    for layer, candidates in zip(layers, fetched, strict=True):
        fresh = [c for c in candidates if c.item_id not in seen]
        kept, into = _shown(fresh, ranker, layer, _reranking(more.rerank, text))
        seen.update(r.candidate.item_id for r in kept)
        found.append(Found(layer.name, kept, into))
    return whole(index, found)


def candidate_fields(layers: Sequence[Layer], recipe: Recipe, refine: Refinements
                     ) -> tuple[str, ...]:
    """The payload keys the candidates are ranked and filtered by: ``RANK_FIELDS``, the
    content when a message's share of questions counts (``ranking.asking``) or a reranker
    reads it, the subject when the hits must be about one."""
    messages = any(not layer.scope.kinds or MESSAGE in layer.scope.kinds for layer in layers)
    content = (recipe.ask_weight > 0 and messages) or refine.rerank is not None
    return RANK_FIELDS + (("content",) if content else ()) + (
        ("subject",) if refine.subject is not None else ())


def whole(index: VectorIndex, found: list[Found]) -> list[Found]:
    """``found`` with each hit's whole payload, read in one call for every layer's hits. A
    hit whose point is gone by then (its subject erased meanwhile) is left out: what an
    erasure removed is never shown."""
    points = [r.candidate.point_id for f in found for r in f.hits
              if r.candidate.point_id is not None]
    read = index.payloads(points) if points else {}
    return [replace(f, hits=[replace(r, candidate=replace(r.candidate, payload=read[point]))
                             for r in f.hits
                             if (point := r.candidate.point_id) is not None and point in read])
            for f in found]


class _Vectors:
    """The candidates' vectors from their points (a keyword hit's too: an embedded item found
    by its words alone is collapsed like any other), as of ``position``, each point read from
    the index once a search: the cosines of the words-only candidates and collapse share
    them."""

    def __init__(self, index: VectorIndex, position: int | None) -> None:
        self._index, self._position = index, position
        self._read: dict[str, Vector | None] = {}

    def __call__(self, candidates: Sequence[Candidate]) -> dict[str, Vector]:
        """``VectorLookup``: those of ``candidates`` embedded as of the position, by item id."""
        items = {c.point_id: c.item_id for c in candidates
                 if c.point_id is not None and embedded_by(c.payload, self._position)}
        missing = [point for point in items if point not in self._read]
        if missing:
            found = self._index.vectors(missing)
            self._read.update({point: found.get(point) for point in missing})
        return {items[point]: vector for point in items
                if (vector := self._read[point]) is not None}


@dataclass(frozen=True)
class _Ranker:
    """How this search ranks a layer's candidates, and where their vectors are found."""

    recipe: Recipe
    now: float
    threshold: float
    signals: Mapping[str, Signals]
    periods: tuple[when.Period, ...]
    query: Sequence[float] | None
    vectors: _Vectors

    def ranked(self, candidates: Sequence[Candidate]) -> list[Ranked]:
        return [r for r in rank(candidates, self.recipe, self.now, self.signals, self.periods)
                if r.relevance >= self.threshold]

    def cosines(self, candidates: Sequence[Candidate], ahead: Sequence[Ranked]
                ) -> dict[str, float]:
        """The candidates' cosines with the query, from their stored (unit) vectors, read
        with those of the hits ranked ``ahead`` of the last that could be shown, which
        collapse compares next: one read of a few vectors costs the index less than a
        dense search among the candidates followed by that read (ADR 0006)."""
        if self.query is None or not candidates:
            return {}
        found = self.vectors([*candidates, *(r.candidate for r in ahead)])
        query = np.asarray(self.query, dtype=np.float32)
        query /= max(float(np.linalg.norm(query)), 1e-12)
        return {c.item_id: float(found[c.item_id] @ query)
                for c in candidates if c.item_id in found}

    def rescored(self, ranked: list[Ranked], changed: Mapping[str, Candidate]) -> list[Ranked]:
        return [r for r in rescore(ranked, changed, self.recipe, self.now, self.signals,
                                   self.periods) if r.relevance >= self.threshold]


Reranking = Callable[[list[Ranked]], list[Ranked]] | None


def _reranking(rerank: Rerank | None, text: str) -> Reranking:
    if rerank is None:
        return None
    return lambda ranked: reorder(ranked, text, rerank.reranker, rerank.depth) if ranked \
        else ranked


def _shown(candidates: Sequence[Candidate], ranker: _Ranker, layer: Layer,
           reranking: Reranking) -> tuple[list[Ranked], dict[str, str]]:
    """A layer's hits to show (ranked, cut, reranked, collapsed) and what collapsed.

    A candidate found by its words alone is ranked by its own cosine with the query
    (``complete_dense``), looked up only when it could be shown: until then it counts with
    the cosine of the last hit dense search returned, which bounds its own from above (dense
    search returns the closest points), so looking it up can only move it down. Only those
    ranked above the last hit that could be shown (the layer's limit and ``SPARE_VECTORS``
    more) are scored, by one dense search among them; with a reranker, all of them (it
    reorders the best few by another score)."""
    limit = layer.limit
    words, bounded = _bounded(candidates, ranker.query)
    zone = len(bounded) if reranking is not None else limit + SPARE_VECTORS
    ranked = ranker.ranked(bounded)
    while True:
        unsure = _unsure(ranked, words, zone)
        if unsure:
            ahead = ranked[:zone + len(unsure)] if reranking is None else []
            asked = [words.pop(item) for item in unsure]
            exact = complete_dense(asked, ranker.cosines(asked, ahead))
            ranked = ranker.rescored(ranked, {c.item_id: c for c in exact})
        shown = reranking(ranked) if reranking is not None else ranked
        kept, into = collapse(shown, ranker.recipe, limit, vectors=ranker.vectors)
        walked = _walked(shown, kept, into)
        if walked <= zone or not any(r.candidate.item_id in words for r in shown[:walked]):
            return kept, into
        zone = walked + SPARE_VECTORS  # collapse went past the zone: look further


def _unsure(ranked: list[Ranked], words: Mapping[str, Candidate], zone: int) -> list[str]:
    """The words-only candidates ranked above the ``zone``-th of the others: once they have
    their own cosine (never above their bound), the first ``zone`` hits are all exact."""
    unsure: list[str] = []
    sure = 0
    for r in ranked:
        if sure == zone:
            break
        if r.candidate.item_id in words:
            unsure.append(r.candidate.item_id)
        else:
            sure += 1
    return unsure


def _bounded(candidates: Sequence[Candidate], query: Sequence[float] | None
             ) -> tuple[dict[str, Candidate], list[Candidate]]:
    """The candidates found by their words alone (by item id), and every candidate with
    those given dense search's lowest cosine (none without a query). Without a dense hit
    among the candidates (none embedded in the scope, or the subject or session filter left
    none) the bound is 1, which no cosine exceeds."""
    returned = [c.dense for c in candidates if c.dense is not None]
    if query is None:
        return {}, list(candidates)
    lowest = min(returned, default=1.0)
    words = {c.item_id: c for c in candidates if c.dense is None and c.point_id is not None}
    return words, [replace(c, dense=lowest, embedded=None) if c.item_id in words else c
                   for c in candidates]


def _walked(shown: list[Ranked], kept: list[Ranked], into: Mapping[str, str]) -> int:
    """How many of ``shown`` collapse looked at: up to the last hit kept or dropped."""
    looked = {r.candidate.item_id for r in kept} | set(into)
    return max((at + 1 for at, r in enumerate(shown) if r.candidate.item_id in looked),
               default=0)


def keyword_only(recipe: Recipe) -> Recipe:
    """``recipe`` ranking by keywords alone: relevance and order are the keyword score."""
    return replace(recipe, dense_weight=0.0, keyword_weight=1.0, order_dense_weight=0.0,
                   order_keyword_weight=1.0)


def _fetched(layer: Layer) -> int:
    return max(layer.limit * OVERFETCH, MIN_CANDIDATES)


def _fetch(index: VectorIndex, vector: QueryVector, words: SparseVector | None,
           layers: Sequence[Layer], fields: Sequence[str]
           ) -> tuple[Sequence[float] | None, list[_Hits]]:
    """The query's embedding and each layer's dense and keyword hits with ``fields`` of
    their payloads: both in one call a layer (one round trip to an index in another process)
    once the embedding is there; while it is still under way, the keyword searches first
    (they need none of it), then the dense ones."""
    if callable(vector) and not _ready(vector):
        early = [index.search_both(None, words, layer.scope, _fetched(layer), fields)[1]
                 for layer in layers]
        dense = vector()
        return dense, [(index.search_both(dense, None, layer.scope, _fetched(layer), fields)[0],
                        found) for layer, found in zip(layers, early, strict=True)]
    dense = vector() if callable(vector) else vector
    return dense, [index.search_both(dense, words, layer.scope, _fetched(layer), fields)
                   for layer in layers]


def _ready(vector: Callable[[], Sequence[float] | None]) -> bool:
    """Whether calling ``vector`` answers without waiting (only a ``BoundedEmbedding`` can
    tell; any other callable counts as under way)."""
    return isinstance(vector, BoundedEmbedding) and vector.ready


def _candidates(dense: list[Hit], keyword: list[Hit], of: Layer) -> list[Candidate]:
    """Dense and keyword hits merged by item (at one (valid, system) point an item has at most
    one version, so one point). A hit written after the search's position, or a dense hit
    embedded after it, was not one then (``written_by``, ``embedded_by``)."""
    merged: dict[str, Candidate] = {}
    layer, seen = of.name, seen_at(of.scope)
    dense = [hit for hit in dense if written_by(hit.payload, of.scope)]
    keyword = [hit for hit in keyword if written_by(hit.payload, of.scope)]
    for hit in dense:
        if not embedded_by(hit.payload, seen):
            continue
        item = str(hit.payload["item_id"])
        merged[item] = Candidate(item, hit.payload, dense=hit.score, layer=layer,
                                 point_id=hit.point_id)
    for hit in keyword:
        item = str(hit.payload["item_id"])
        known = merged.get(item)
        merged[item] = Candidate(item, hit.payload, dense=None if known is None else known.dense,
                                 keyword=hit.score, layer=layer, point_id=hit.point_id,
                                 embedded=None if known is None else True)
    return list(merged.values())


def embedded_by(payload: Mapping[str, object], position: int | None) -> bool:
    """Whether a point had its dense vector at ``position`` (None: now). The index keeps a
    point's current vector only, with the position it came at: as of an earlier position the
    point was not yet embedded, so a search pinned there (an audited one, and its replay)
    judges it as it did then. A point without that position counts as embedded all along."""
    came = payload.get(EMBEDDED_FROM)
    return position is None or not isinstance(came, int | float) or came <= position


def _outside(candidate: Candidate, session: str | None) -> bool:
    return session is None or candidate.payload.get("session") != session


def _about(candidate: Candidate, subject: str | None) -> bool:
    if subject is None:
        return True
    found = candidate.payload.get("subject")
    return isinstance(found, str) and found.casefold() == subject.casefold()

"""Semantic search over the vector read model: the query embedded once, dense and keyword
candidates fetched per layer of scope, then ranked, cut at the mode's threshold and collapsed
(``ranking``). Plain functions over the ``VectorIndex`` port; HTTP lives in ``semantic_http``.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import Hit, Scope, VectorIndex
from memledger_query.ranking import Candidate, Ranked, Recipe, collapse, rank

OVERFETCH = 4
"""Candidates fetched per result wanted, from each of dense and keyword search: ranking
reorders them, collapse and the subject filter drop some."""
MIN_CANDIDATES = 40


@dataclass(frozen=True)
class Layer:
    """One level of a hierarchical search (or the only one of a flat search)."""

    name: str
    scope: Scope
    limit: int


@dataclass(frozen=True)
class Found:
    layer: str
    hits: list[Ranked]
    collapsed: dict[str, str] = field(default_factory=dict)


def search(index: VectorIndex, vector: Sequence[float] | None, text: str,
           layers: Sequence[Layer], recipe: Recipe, *, threshold: float, now: float,
           subject: str | None = None) -> list[Found]:
    """Each layer's best hits above ``threshold``; an item found in an earlier layer is not
    repeated in a later one."""
    query = sparse.encode_query(text)
    seen: set[str] = set()
    found = []
    for layer in layers:
        fetch = max(layer.limit * OVERFETCH, MIN_CANDIDATES)
        dense = index.search(vector, layer.scope, fetch) if vector is not None else []
        keyword = (index.search_sparse(query, layer.scope, fetch)
                   if recipe.keyword_weight > 0 and query.indices else [])
        candidates = [c for c in _candidates(dense, keyword, layer.name)
                      if c.item_id not in seen and _about(c, subject)]
        ranked = [r for r in rank(candidates, recipe, now) if r.relevance >= threshold]
        kept, into = collapse(ranked, recipe)
        kept = kept[:layer.limit]
        seen.update(r.candidate.item_id for r in kept)
        found.append(Found(layer.name, kept, into))
    return found


def _candidates(dense: list[Hit], keyword: list[Hit], layer: str) -> list[Candidate]:
    """Dense and keyword hits merged by item (at one (valid, system) point an item has at most
    one version, so one point)."""
    merged: dict[str, Candidate] = {}
    for hit in dense:
        item = str(hit.payload["item_id"])
        merged[item] = Candidate(item, hit.payload, dense=hit.score, vector=hit.vector,
                                 layer=layer)
    for hit in keyword:
        item = str(hit.payload["item_id"])
        known = merged.get(item)
        merged[item] = (Candidate(item, hit.payload, keyword=hit.score, layer=layer)
                        if known is None else Candidate(
                            item, known.payload, dense=known.dense, keyword=hit.score,
                            vector=known.vector, layer=layer))
    return list(merged.values())


def _about(candidate: Candidate, subject: str | None) -> bool:
    if subject is None:
        return True
    found = candidate.payload.get("subject")
    return isinstance(found, str) and found.casefold() == subject.casefold()

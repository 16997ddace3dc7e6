"""Ranking search candidates: pure, so a ranking can be explained and repeated.

The recipe is data (``Recipe``): how dense and keyword relevance are fused, how fast each kind
of memory fades, how much importance and confidence count, and when two hits are the same
memory. Relevance is what a mode's threshold cuts on; the final score orders the results:

    relevance = dense_weight * max(cosine, 0) + keyword_weight * bm25 / (bm25 + keyword_half)
    decay     = 0.5 ** (age_days / half_life_days[kind])       (computed now, never stored)
    final     = relevance * (1 - recency_weight + recency_weight * decay)
                          * (1 + importance_weight * (importance - 0.5))
                          * (1 - confidence_weight * (1 - confidence))
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

Mode = Literal["execution", "planning", "brainstorming"]

_DAY = 86_400.0


@dataclass(frozen=True)
class ModeDefaults:
    k: int
    threshold: float


MODES: dict[str, ModeDefaults] = {
    # Thresholds on relevance, calibrated for all-MiniLM-L6-v2 (whose cosine for a good
    # paraphrase sits around 0.6-0.8, not the 0.9 a larger model gives): see docs/search.md.
    "execution": ModeDefaults(k=5, threshold=0.45),
    "planning": ModeDefaults(k=20, threshold=0.25),
    "brainstorming": ModeDefaults(k=30, threshold=0.12),
}


@dataclass(frozen=True)
class Recipe:
    dense_weight: float = 0.7
    keyword_weight: float = 0.3
    keyword_half: float = 4.0
    """The BM25 score that counts as half relevant (BM25 is unbounded; this maps it to 0..1)."""
    recency_weight: float = 0.2
    importance_weight: float = 0.2
    confidence_weight: float = 0.3
    duplicate_cosine: float = 0.95
    half_life_days: dict[str, float] = field(default_factory=lambda: {
        "decision": 365.0, "correction": 365.0, "steering_rule": 730.0, "procedure": 365.0,
        "preference": 180.0, "fact": 180.0, "observation": 30.0, "episode": 14.0})
    default_half_life_days: float = 30.0


@dataclass(frozen=True)
class Candidate:
    """One item version found by dense search, keyword search or both."""

    item_id: str
    payload: dict[str, Any]
    dense: float | None = None
    keyword: float | None = None
    vector: Sequence[float] | None = None
    layer: str = "space"


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    relevance: float
    score: float
    explain: dict[str, float]


def rank(candidates: Sequence[Candidate], recipe: Recipe, now: float) -> list[Ranked]:
    """Every candidate scored, best first (ties broken by item id, so a ranking repeats)."""
    return sorted((score(c, recipe, now) for c in candidates),
                  key=lambda r: (-r.score, r.candidate.item_id))


def score(c: Candidate, recipe: Recipe, now: float) -> Ranked:
    dense = max(c.dense or 0.0, 0.0)
    raw_keyword = c.keyword or 0.0
    keyword = raw_keyword / (raw_keyword + recipe.keyword_half) if raw_keyword > 0 else 0.0
    relevance = recipe.dense_weight * dense + recipe.keyword_weight * keyword
    p = c.payload
    half_life = recipe.half_life_days.get(str(p.get("kind")), recipe.default_half_life_days)
    age_days = max(0.0, now - float(p.get("content_at") or now)) / _DAY
    decay = math.pow(0.5, age_days / half_life)
    recency = 1 - recipe.recency_weight + recipe.recency_weight * decay
    importance = 1 + recipe.importance_weight * (float(p.get("importance", 0.5)) - 0.5)
    confidence = 1 - recipe.confidence_weight * (1 - float(p.get("confidence", 1.0)))
    final = relevance * recency * importance * confidence
    return Ranked(c, relevance, final, {
        "dense": round(dense, 6), "keyword_bm25": round(raw_keyword, 6),
        "keyword": round(keyword, 6), "relevance": round(relevance, 6),
        "age_days": round(age_days, 3), "half_life_days": half_life,
        "decay": round(decay, 6), "recency_factor": round(recency, 6),
        "importance_factor": round(importance, 6), "confidence_factor": round(confidence, 6),
        "score": round(final, 6)})


def collapse(ranked: Sequence[Ranked], recipe: Recipe) -> tuple[list[Ranked], dict[str, str]]:
    """Drop near-duplicates (cosine above ``duplicate_cosine``) of a better hit; return the kept
    hits and, for each dropped item, the item it collapsed into."""
    kept: list[Ranked] = []
    vectors: list[npt.NDArray[np.float32]] = []
    owners: list[Ranked] = []
    into: dict[str, str] = {}
    for hit in ranked:
        vector = _unit(hit.candidate.vector)
        if vector is not None and vectors:
            similar = np.stack(vectors) @ vector
            best = int(np.argmax(similar))
            if float(similar[best]) > recipe.duplicate_cosine:
                into[hit.candidate.item_id] = owners[best].candidate.item_id
                continue
        kept.append(hit)
        if vector is not None:
            vectors.append(vector)
            owners.append(hit)
    return kept, into


def _unit(vector: Sequence[float] | None) -> "npt.NDArray[np.float32] | None":
    if vector is None:
        return None
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm else None
